"""The models of a task's life, re-exported so that every caller imports from here."""

from reports.models.accounts import ApiToken, Budget
from reports.models.states import (
    ADMIN_RESOLUTIONS,
    CLAIM_ORDER,
    LEASED,
    STAGES,
    TERMINAL,
    TRANSITIONS,
    AttemptStatus,
    CostStatus,
    ErrorType,
    IllegalTransition,
    Lane,
    Stage,
    Status,
)
from reports.models.tasks import (
    Attempt,
    Document,
    Event,
    PreparedText,
    Task,
    TaskEvent,
    TaskQuerySet,
    db_now_plus,
)

__all__ = [
    "ADMIN_RESOLUTIONS",
    "CLAIM_ORDER",
    "LEASED",
    "STAGES",
    "TERMINAL",
    "TRANSITIONS",
    "ApiToken",
    "Attempt",
    "AttemptStatus",
    "Budget",
    "CostStatus",
    "Document",
    "ErrorType",
    "Event",
    "IllegalTransition",
    "Lane",
    "PreparedText",
    "Stage",
    "Status",
    "Task",
    "TaskEvent",
    "TaskQuerySet",
    "db_now_plus",
]
