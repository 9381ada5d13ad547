"""A task's statuses and the table of allowed changes (docs/lifecycle.md), its error
types, an attempt's statuses, cost statuses and lanes."""

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

# docs/lifecycle.md, the whole table. `reconciliation_required` leaves only by an admin's resolve.
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
# An administrator's ways out of it: run it again, or take the call as failed. Never
# `succeeded`: success is a validated, saved report, which such a task does not have.
ADMIN_RESOLUTIONS = frozenset({Status.QUEUED, Status.FAILED})


class ErrorType(models.TextChoices):
    """Why a task (or one attempt of it) failed: the `error_type` of docs/api.md."""

    PROVIDER_ERROR = "provider_error"
    PROVIDER_AUTH = "provider_auth"
    PROVIDER_REJECTED = "provider_rejected"
    PROVIDER_QUOTA = "provider_quota"
    RATE_LIMITED = "rate_limited"
    STREAM_TRUNCATED = "stream_truncated"
    EMPTY_OUTPUT = "empty_output"
    STALLED = "stalled"
    TIMEOUT = "timeout"
    VALIDATION_FAILED = "validation_failed"
    SAVE_FAILED = "save_failed"
    INVALID_INPUT = "invalid_input"
    BUDGET_EXHAUSTED = "budget_exhausted"
    WORKER_LOST = "worker_lost"
    WORKER_ERROR = "worker_error"  # the attempt raised: a bug or a broken file, not the provider
    DEGENERATE_OUTPUT = "degenerate_output"  # the model fell into a loop; its call was stopped


# The failures the provider itself reported for a request (an HTTP error status, or no
# connection): it refused the request before writing anything, and its own error text is
# what the message carries.
PROVIDER_FAILURES = frozenset(
    {
        ErrorType.PROVIDER_ERROR,
        ErrorType.PROVIDER_AUTH,
        ErrorType.PROVIDER_REJECTED,
        ErrorType.PROVIDER_QUOTA,
        ErrorType.RATE_LIMITED,
    }
)


class AttemptStatus(models.TextChoices):
    """Where one attempt stands or how it ended (a task's status says where the task is)."""

    RUNNING = "running"
    FINALIZING = "finalizing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RETRY_SCHEDULED = "retry_scheduled"
    INTERRUPTED = "interrupted"
    RECONCILIATION_REQUIRED = "reconciliation_required"


class Stage(models.TextChoices):
    """The timed stages of an attempt, in the order they run (the keys of `stage_ms`)."""

    PARSE = "parse"
    PREPARE = "prepare"
    GENERATE = "generate"
    VALIDATE = "validate"
    RENDER = "render"
    SAVE = "save"


STAGES = tuple(Stage.values)


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
    """A status change that docs/lifecycle.md does not allow."""
