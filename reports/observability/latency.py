"""The figures of the staff latency page: percentiles per link of the chain, and rates.

Every task created in the window counts. A task that timed out (`timeout`, or
`stalled`: no text for the stall limit) is never dropped: where it never reached a
milestone (claim, first text, first text on the page) it is counted at the time it
ended, as a lower bound (a censored sample, see `reports.observability.percentiles`); its total is
its time to the timeout; its last stage lasts until the timeout.

One-call tasks and planned ones (a plan of more than one provider call, `Task.plan`) can
be measured apart: a planned task reads a whole long document and takes longer by design.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.db.models.functions import Now

from reports.models import (
    STAGES,
    TERMINAL,
    Attempt,
    CircuitState,
    ErrorType,
    PlanCall,
    ProviderCircuit,
    Status,
    Task,
)
from reports.models.breaker import provider_name
from reports.observability.delivery_cost import ModelCost, model_costs
from reports.observability.percentiles import Sample, Summary, summarize

TIMEOUT_ERRORS = (ErrorType.TIMEOUT, ErrorType.STALLED)
WINDOWS = {
    "1h": ("last hour", timedelta(hours=1)),
    "24h": ("last 24 hours", timedelta(hours=24)),
    "7d": ("last 7 days", timedelta(days=7)),
    "all": ("all time", None),
}
DEFAULT_WINDOW = "24h"
# A task that has not made its plan yet (or an older one) counts as one call.
ONE_CALL = Q(plan__isnull=True) | Q(plan__calls__lte=1)
CALLS = {  # key: (label, which tasks)
    "all": ("every task", Q()),
    "one": ("one-call tasks", ONE_CALL),
    "planned": ("planned tasks (more than one call)", ~ONE_CALL),
}
DEFAULT_CALLS = "all"
TASK_METRICS = (  # key, short label (charts), what it measures (tables)
    ("queue", "Queue", "submit → first claim"),
    ("first_text", "First text, backend", "submit → first text written"),
    ("frontend_first_text", "First text, browser", "submit → first text on the page"),
    ("total", "Total", "submit → result saved (or the task ended)"),
)


@dataclass(frozen=True)
class Rate:
    label: str
    count: int
    of: int  # the denominator: tasks that ended in the window

    @property
    def percent(self) -> float | None:
        return None if self.of == 0 else round(100 * self.count / self.of, 1)


@dataclass(frozen=True)
class Circuit:
    """The provider's circuit as the page shows it (docs/providers.md)."""

    provider: str
    state: str
    failures: int  # calls in a row that failed for the provider's own reasons
    opened: int  # times it opened, ever
    next_try_at: datetime | None  # open: when a probe may go
    changed_at: datetime | None


def circuit() -> Circuit:
    found = ProviderCircuit.objects.current()
    if found is None:
        return Circuit(provider_name(), CircuitState.CLOSED, 0, 0, None, None)
    return Circuit(
        found.provider,
        found.state,
        found.failures,
        found.opened_total,
        found.next_try_at,
        found.changed_at,
    )


@dataclass(frozen=True)
class Figures:
    window: str
    calls: str  # a key of CALLS
    tasks: int  # created in the window, of the kind `calls` selects
    planned: int  # of which planned
    ended: int
    task_metrics: list[tuple[str, str, str, Summary]]  # key, label, what it measures, summary
    stage_metrics: list[tuple[str, str, str, Summary]]
    rates: list[Rate]
    model_costs: list[ModelCost]
    circuit: Circuit


def _ms(start, end) -> float:
    return (end - start).total_seconds() * 1000


def tasks_in(window: str, calls: str = DEFAULT_CALLS):
    since = WINDOWS[window][1]
    tasks = Task.objects.filter(CALLS[calls][1])
    if since is not None:
        tasks = tasks.filter(created_at__gte=Now() - since)
    return tasks


def figures(window: str, calls: str = DEFAULT_CALLS) -> Figures:
    """Return the page's figures for tasks created in `window` (a key of WINDOWS), of the
    kind `calls` (a key of CALLS)."""
    small = settings.REPORTS_LATENCY_SMALL_SAMPLE
    samples: dict[str, list[Sample]] = {key: [] for key, *_ in TASK_METRICS}
    counts = {"ended": 0, "failed": 0, "cancelled": 0, "timed_out": 0, "reconciliation": 0}
    tasks = tasks_in(window, calls)
    rows = tasks.annotate(planned=~ONE_CALL).values_list(
        "status",
        "error_type",
        "created_at",
        "claimed_at",
        "first_text_at",
        "finished_at",
        "frontend_first_text_ms",
        "planned",
    )
    total = planned_count = 0
    for row in rows.iterator():
        status, error_type, created, claimed, first_text, finished, frontend, planned = row
        total += 1
        planned_count += bool(planned)
        timed_out = status == Status.FAILED and error_type in TIMEOUT_ERRORS
        ended_ms = _ms(created, finished) if finished else None
        bound = Sample(ended_ms, censored=True) if timed_out and ended_ms is not None else None
        for key, exact in (
            ("queue", claimed and _ms(created, claimed)),
            ("first_text", first_text and _ms(created, first_text)),
            ("frontend_first_text", frontend),
        ):
            if exact is not None:
                samples[key].append(Sample(exact))
            elif bound is not None:
                samples[key].append(bound)
        if ended_ms is not None:
            samples["total"].append(Sample(ended_ms))
        if status in TERMINAL:
            counts["ended"] += 1
            counts["failed"] += status == Status.FAILED
            counts["cancelled"] += status == Status.CANCELLED
            counts["timed_out"] += timed_out
            counts["reconciliation"] += status == Status.RECONCILIATION_REQUIRED
    ended = counts["ended"]
    return Figures(
        window=window,
        calls=calls,
        tasks=total,
        planned=planned_count,
        ended=ended,
        task_metrics=[
            (key, label, measures, summarize(samples[key], small_below=small))
            for key, label, measures in TASK_METRICS
        ],
        stage_metrics=[
            (stage, stage, "per ended attempt", summarize(found, small_below=small))
            for stage, found in _stage_samples(tasks).items()
        ]
        + [
            (key, label, "per ended call of a plan", summarize(found, small_below=small))
            for key, label, found in _call_samples(tasks)
        ],
        rates=[
            Rate("failed", counts["failed"], ended),
            Rate("of which timed out", counts["timed_out"], ended),
            Rate("cancelled", counts["cancelled"], ended),
            Rate("reconciliation required", counts["reconciliation"], ended),
        ],
        model_costs=model_costs(tasks),
        circuit=circuit(),
    )


def _stage_samples(tasks) -> dict[str, list[Sample]]:
    """Return each stage's durations over the ended attempts of `tasks`, in chain order."""
    found: dict[str, list[Sample]] = {stage: [] for stage in STAGES}
    attempts = Attempt.objects.filter(task__in=tasks, ended_at__isnull=False)
    for stage_ms, error_type in attempts.values_list("stage_ms", "error_type").iterator():
        last = list(stage_ms)[-1] if stage_ms else None
        for stage, ms in stage_ms.items():
            # The stage a timeout cut short lasted at least this long.
            censored = stage == last and error_type in TIMEOUT_ERRORS
            found.setdefault(stage, []).append(Sample(ms, censored))
    return found


def _call_samples(tasks) -> list[tuple[str, str, list[Sample]]]:
    """Return the durations of the ended calls of the plans of `tasks`, parts and rounds
    apart; none when no task of the window was planned."""
    found: dict[str, list[Sample]] = {kind: [] for kind in PlanCall.Kind.values}
    calls = PlanCall.objects.filter(task__in=tasks, duration_ms__isnull=False)
    for kind, ms in calls.values_list("kind", "duration_ms").iterator():
        found.setdefault(kind, []).append(Sample(ms))
    if not any(found.values()):
        return []
    return [(f"{kind}_call", f"{kind} call", samples) for kind, samples in found.items()]
