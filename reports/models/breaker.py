"""The provider's circuit (docs/providers.md, "When the provider is down"): one row per
provider, shared by every worker, and what the pages, `/readyz` and `/metrics` read of it.

The rules that move it live with the worker (`reports.worker.breaker`); here is the table,
its reads, and the cooldown.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models.functions import Now

from reports.models.compiled import CompiledRead

COOLDOWN_CAP_S = 600.0  # the cooldown doubles while probes fail, up to ten minutes


class CircuitState(models.TextChoices):
    CLOSED = "closed"  # calls go to the provider
    OPEN = "open"  # no call goes until `retry_at`
    PROBING = "probing"  # one task's call is testing the provider


def provider_name() -> str:
    """Return the name of the provider this deployment calls: the circuit's key."""
    return settings.REPORTS_PROVIDER


def cooldown_s(trips: int) -> float:
    """Return how long the circuit stays open after its `trips`-th opening in a row:
    REPORTS_BREAKER_COOLDOWN_S, doubled with each failed probe, at most ten minutes."""
    base = settings.REPORTS_BREAKER_COOLDOWN_S
    doublings = min(max(0, trips - 1), 30)  # past the cap long before; a float stays finite
    return min(base * 2**doublings, max(base, COOLDOWN_CAP_S))


class CircuitQuerySet(models.QuerySet):
    def current(self) -> ProviderCircuit | None:
        """Return the circuit of this deployment's provider; None: it never failed. Every
        claim and every page's status line reads it: its SQL is compiled once."""
        return _CURRENT.instance(provider_name())


class ProviderCircuit(models.Model):
    provider = models.CharField(max_length=64, primary_key=True)
    state = models.CharField(
        max_length=16, choices=CircuitState.choices, default=CircuitState.CLOSED
    )
    # Calls in a row that failed for the provider's own reasons (reports.worker.breaker).
    failures = models.PositiveIntegerField(default=0)
    # Openings since it last closed: the cooldown doubles with each.
    trips = models.PositiveIntegerField(default=0)
    opened_total = models.PositiveBigIntegerField(default=0)  # every opening, ever
    retry_at = models.DateTimeField(null=True, blank=True)  # open: when a probe may go
    # Probing: the task whose call is the probe, at the epoch of the attempt making it.
    probe_task_id = models.UUIDField(null=True, blank=True)
    probe_epoch = models.PositiveBigIntegerField(null=True, blank=True)
    changed_at = models.DateTimeField(db_default=Now())
    version = models.PositiveBigIntegerField(default=0)  # bumped by every change

    objects = CircuitQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.provider} ({self.state})"

    @property
    def is_closed(self) -> bool:
        return self.state == CircuitState.CLOSED

    @property
    def next_try_at(self) -> datetime | None:
        """When the provider is tried next: open, the probe's earliest start; else None."""
        return self.retry_at if self.state == CircuitState.OPEN else None


_CURRENT = CompiledRead(
    lambda provider: ProviderCircuit.objects.filter(provider=provider)[:1],
    lambda provider: [(ProviderCircuit._meta.pk, provider)],
)
