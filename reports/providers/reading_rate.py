"""How fast the provider's model reads a prompt, learned from earlier calls.

A model on a CPU reads a long prompt for tens of seconds before it writes; how long is the
prompt's tokens over this rate. The rate is kept per provider and model in the database,
so every worker learns from every call (a moving average; docs/providers.md, "Reading").
It gives the page its estimate, and the stall clock its start: it counts only once the
reading should be over, by this rate with a margin.
"""

from __future__ import annotations

from django.db import transaction

from reports.models import ProviderFigures
from reports.providers.concurrency import provider_key

WEIGHT = 0.3  # a new call's share of the average
MIN_TOKENS = 32  # a shorter read says more about latency than about the rate
MIN_SECONDS = 0.05


def tokens_per_s(key: str | None = None) -> float | None:
    """The learned rate; None before any call taught it."""
    return (
        ProviderFigures.objects.filter(key=key or provider_key())
        .values_list("reading_tokens_per_s", flat=True)
        .first()
    )


def learn(tokens: int, seconds: float, key: str | None = None) -> float | None:
    """Fold one call's reading (`tokens` read in `seconds`) into the rate; return it."""
    if tokens < MIN_TOKENS or seconds < MIN_SECONDS:
        return tokens_per_s(key)
    rate = tokens / seconds
    with transaction.atomic():
        figures, _ = ProviderFigures.objects.select_for_update().get_or_create(
            key=key or provider_key()
        )
        old = figures.reading_tokens_per_s
        new = rate if old is None else (1 - WEIGHT) * old + WEIGHT * rate
        ProviderFigures.objects.filter(pk=figures.pk).update(reading_tokens_per_s=new)
    return new
