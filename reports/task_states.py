"""A task's statuses and the table of allowed changes (SPEC §2), its error types, cost
statuses and lanes. Re-exported from reports.models."""

from __future__ import annotations

from django.db import models


class Status(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    FINALIZING = "finalizing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RECONCILIATION_REQUIRED = "reconciliation_required"


TERMINAL = frozenset(
    {Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.RECONCILIATION_REQUIRED}
)
LEASED = (Status.RUNNING, Status.FINALIZING)
CLAIM_ORDER = ("created_at", "pk")  # oldest first; the id breaks ties within a millisecond

# SPEC §2, the whole table. `reconciliation_required` leaves only by an admin's resolve.
TRANSITIONS: dict[str, frozenset[str]] = {
    Status.QUEUED: frozenset({Status.RUNNING, Status.CANCELLED}),
    Status.RUNNING: frozenset(
        {
            Status.FINALIZING,
            Status.QUEUED,
            Status.FAILED,
            Status.CANCELLED,
            Status.RECONCILIATION_REQUIRED,
        }
    ),
    Status.FINALIZING: frozenset({Status.SUCCEEDED, Status.FAILED}),
    Status.SUCCEEDED: frozenset(),
    Status.FAILED: frozenset(),
    Status.CANCELLED: frozenset(),
    Status.RECONCILIATION_REQUIRED: frozenset(),
}
ADMIN_RESOLUTIONS = frozenset({Status.QUEUED, Status.FAILED, Status.SUCCEEDED})

ERROR_TYPES = (
    "provider_error",
    "provider_auth",
    "provider_rejected",
    "provider_quota",
    "rate_limited",
    "stream_truncated",
    "empty_output",
    "stalled",
    "timeout",
    "validation_failed",
    "save_failed",
    "invalid_input",
    "budget_exhausted",
    "worker_lost",
)


class CostStatus(models.TextChoices):
    NONE = "none"
    RESERVED = "reserved"
    SETTLED = "settled"
    PENDING_RECONCILIATION = "pending_reconciliation"
    RELEASED = "released"


class Lane(models.TextChoices):
    SHORT = "short"
    LONG = "long"


class IllegalTransition(Exception):
    """A status change that SPEC §2 does not allow."""
