"""How many calls the provider runs at once, and the gate that keeps the rest queued here.

A server with a few slots (llama-server) takes every call it is sent and makes the extra
ones wait inside it, silent, while their clocks run. So the worker starts no more calls
than the provider runs at once; the other tasks stay `queued` in Reportline's own queue,
where their page shows a place in line and a wait (docs/providers.md, "Concurrency").

The limit is the lowest of what is known: REPORTS_PROVIDER_CONCURRENCY, the slots the
server says it has (llama-server's `/props`), and an adaptive limit learned from the calls
(additive increase, multiplicative decrease): halved after a 429 or an overload, or when a
call waited inside the server before it began reading; raised by 1/limit after a call that
did not. Calls in flight are counted from live leases of running tasks, in the claim's own
transaction, never kept as a counter.
"""

from __future__ import annotations

import math

from django.conf import settings
from django.db import transaction

from reports.models import CompiledRead, ProviderFigures, Status, Task

DECREASE = 0.5  # the limit's share kept after an overload
# A call that waited longer than this inside the server before it began reading was queued
# there: the server had no free slot.
SERVER_WAIT_S = 2.0


def provider_key() -> str:
    """Name the configured provider's server and model: what the figures are kept by."""
    name = settings.REPORTS_PROVIDER
    options = settings.REPORTS_PROVIDERS.get(name, {}).get("OPTIONS", {})
    return f"{name} {options.get('base_url', '')} {settings.REPORTS_MODEL}"


_FIGURES = CompiledRead(
    lambda key: ProviderFigures.objects.filter(key=key)[:1],
    lambda key: [(ProviderFigures._meta.get_field("key"), key)],
)


def read_figures(key: str | None = None) -> ProviderFigures | None:
    """What is kept of the provider: its slots, learned limit and reading rate."""
    return _FIGURES.instance(key or provider_key())  # every claim reads it


def ceiling(figures: ProviderFigures | None) -> int | None:
    """The most calls at once anyone said the provider takes; None: nobody said."""
    known = [n for n in (settings.REPORTS_PROVIDER_CONCURRENCY, figures and figures.slots) if n]
    return min(known) if known else None


def limit(figures: ProviderFigures | None = None, *, read: bool = True) -> int | None:
    """The calls the provider is given at once now; None: no limit."""
    if read and figures is None:
        figures = read_figures()
    top = ceiling(figures)
    learned = figures.limit if figures is not None else None
    if learned is None:
        return top
    learned = max(1, math.floor(learned))
    return learned if top is None else min(top, learned)


def in_flight() -> int:
    """Calls under way: running tasks under a live lease."""
    return Task.objects.live_leases().filter(status=Status.RUNNING).count()


def has_free_seat(figures: ProviderFigures | None) -> bool:
    """Whether another call may start now, by the `figures` the claim's transaction read
    (`read_figures`)."""
    most = limit(figures, read=False)
    return most is None or in_flight() < most


def free_seats() -> int | None:
    """Calls that may start now besides those under way; None: no limit. A plan's notes
    calls side by side take no more than this."""
    most = limit()
    return None if most is None else max(0, most - in_flight())


def record_slots(slots: int | None, key: str | None = None) -> None:
    """Keep the slots the server says it has (None: it says nothing, or no longer)."""
    key = key or provider_key()
    if ProviderFigures.objects.filter(key=key, slots=slots).exists():
        return
    ProviderFigures.objects.update_or_create(key=key, defaults={"slots": slots})


def after_call(*, overloaded: bool, server_wait_s: float | None, key: str | None = None) -> None:
    """Teach the adaptive limit how a call went: halve it after an overload (a 429, a 503)
    or a wait inside the server, else raise it by 1/limit."""
    crowded = overloaded or (server_wait_s is not None and server_wait_s > SERVER_WAIT_S)
    if not crowded:
        figures = read_figures(key)
        if figures is None or figures.limit is None:
            return  # nothing to raise: the known ceiling (or none) stands
    with transaction.atomic():
        figures, _ = ProviderFigures.objects.select_for_update().get_or_create(
            key=key or provider_key()
        )
        top = ceiling(figures)
        current = figures.limit
        if current is None:  # the first crowding: halve what was running
            current = float(top or max(1, in_flight()))
        if crowded:
            learned = max(1.0, current * DECREASE)
        else:
            learned = current + 1 / current
            if top is not None:
                learned = min(float(top), learned)
        ProviderFigures.objects.filter(pk=figures.pk).update(limit=learned)
