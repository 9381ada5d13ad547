"""The models of a task's life, re-exported so that every caller imports from here."""

from reports.models.accounts import ApiToken, Budget
from reports.models.breaker import CircuitState, ProviderCircuit
from reports.models.compiled import CompiledInsert, CompiledRead, CompiledUpdate
from reports.models.held import Held
from reports.models.plans import PlanCall, SourcePassage
from reports.models.providers import ProviderFigures
from reports.models.sharing import ShareLink
from reports.models.tasks import (
    Attempt,
    Document,
    Event,
    PreparedText,
    Task,
    TaskEvent,
    TaskQuerySet,
    at_cap_parameters,
    db_now_plus,
    live_lease_parameters,
)
from reports.models.webhooks import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from reports.states import (
    ADMIN_RESOLUTIONS,
    CLAIM_ORDER,
    LEASED,
    PROVIDER_FAILURES,
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

__all__ = [
    "ADMIN_RESOLUTIONS",
    "CLAIM_ORDER",
    "LEASED",
    "PROVIDER_FAILURES",
    "STAGES",
    "TERMINAL",
    "TRANSITIONS",
    "ApiToken",
    "Attempt",
    "AttemptStatus",
    "Budget",
    "CircuitState",
    "CompiledInsert",
    "CompiledRead",
    "CompiledUpdate",
    "CostStatus",
    "DeliveryStatus",
    "Document",
    "ErrorType",
    "Event",
    "Held",
    "IllegalTransition",
    "Lane",
    "PlanCall",
    "PreparedText",
    "ProviderCircuit",
    "ProviderFigures",
    "ShareLink",
    "SourcePassage",
    "Stage",
    "Status",
    "Task",
    "TaskEvent",
    "TaskQuerySet",
    "WebhookDelivery",
    "WebhookEndpoint",
    "at_cap_parameters",
    "db_now_plus",
    "live_lease_parameters",
]
