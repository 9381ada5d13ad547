"""Prometheus metrics, derived from the database at scrape time.

Workers run in other processes than the web process that is scraped, so counters kept
in the web process's memory would miss their work, and every restart would reset them.
The task and attempt tables already hold every figure, so this collector computes the
histograms, counters and gauges from them at each scrape, in a handful of aggregate
queries: correct across any number of processes and restarts, with nothing to keep in
step. Only ended tasks and attempts are counted in histograms and counters (their
figures no longer change, so the series only grow). Ids never become labels: the labels
are lane, outcome, error type and stage, a small fixed set.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, FloatField, Q, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from reports.latency import STAGES, TIMEOUT_ERRORS
from reports.models import TERMINAL, Attempt, Lane, Status, Task

# Seconds: from a fast parse (5 ms) to a long report (30 min).
BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
ENDED_ATTEMPT = ~Q(status__in=[Attempt.Outcome.RUNNING, Attempt.Outcome.FINALIZING])

TASK_HISTOGRAMS = (
    ("reportline_task_queue_seconds", "Submit to first claim, per ended task.", "claimed_at"),
    (
        "reportline_task_first_text_seconds",
        "Submit to the first text (backend), per ended task that had text.",
        "first_text_at",
    ),
    (
        "reportline_task_duration_seconds",
        "Submit to the saved result or the end (timeouts: up to the timeout), per ended task.",
        "finished_at",
    ),
)


def _buckets(row: dict) -> list[tuple[str, float]]:
    """Return the buckets of a row of `b<i>` counts (each already cumulative: `<= bound`)."""
    buckets = [(f"{bound:g}", row[f"b{i}"]) for i, bound in enumerate(BUCKETS_S)]
    return [*buckets, ("+Inf", row["n"])]


class DatabaseCollector:
    """Collect Reportline's metrics from the task table (see the module docstring)."""

    def collect(self):
        ended = Task.objects.filter(status__in=TERMINAL)
        for name, doc, end_field in TASK_HISTOGRAMS:
            yield self._task_histogram(ended, name, doc, end_field)
        yield self._stage_histogram()
        yield from self._counters(ended)
        yield from self._gauges()

    def _task_histogram(self, ended, name: str, doc: str, end_field: str):
        family = HistogramMetricFamily(name, doc, labels=["lane", "outcome"])
        took = ExpressionWrapper(F(end_field) - F("created_at"), output_field=DurationField())
        aggregates = {
            f"b{i}": Count("pk", filter=Q(took__lte=timedelta(seconds=bound)))
            for i, bound in enumerate(BUCKETS_S)
        }
        rows = (
            ended.filter(**{f"{end_field}__isnull": False})
            .annotate(took=took)
            .values("lane", "status")
            .order_by("lane", "status")
            .annotate(n=Count("pk"), total=Sum("took"), **aggregates)
        )
        for row in rows:
            total = row["total"] or timedelta(0)
            family.add_metric(
                [row["lane"], row["status"]],
                _buckets(row),
                sum_value=total.total_seconds(),
            )
        return family

    def _stage_histogram(self):
        family = HistogramMetricFamily(
            "reportline_stage_seconds",
            "Duration of each stage of each ended attempt (outcome: the attempt's).",
            labels=["stage", "lane", "outcome"],
        )
        attempts = Attempt.objects.filter(ENDED_ATTEMPT)
        for stage in STAGES:
            took = Cast(KT(f"stage_ms__{stage}"), FloatField())
            aggregates = {
                f"b{i}": Count("pk", filter=Q(took__lte=bound * 1000))
                for i, bound in enumerate(BUCKETS_S)
            }
            rows = (
                attempts.annotate(took=took)
                .filter(took__isnull=False)
                .values("task__lane", "status")
                .order_by("task__lane", "status")
                .annotate(n=Count("pk"), total=Sum("took"), **aggregates)
            )
            for row in rows:
                family.add_metric(
                    [stage, row["task__lane"], row["status"]],
                    _buckets(row),
                    sum_value=(row["total"] or 0) / 1000,
                )
        return family

    def _counters(self, ended):
        outcomes = CounterMetricFamily(
            "reportline_tasks_ended",
            "Ended tasks by outcome and error type ('' when none).",
            labels=["lane", "outcome", "error_type"],
        )
        for row in (
            ended.values("lane", "status", "error_type")
            .order_by("lane", "status", "error_type")
            .annotate(n=Count("pk"))
        ):
            outcomes.add_metric([row["lane"], row["status"], row["error_type"]], row["n"])
        yield outcomes

        retries = CounterMetricFamily(
            "reportline_retries", "Attempts after a task's first (re-runs).", labels=["lane"]
        )
        per_lane = _by_lane(Attempt.objects.filter(number__gt=1), "task__lane")
        for lane in Lane.values:
            retries.add_metric([lane], per_lane[lane])
        yield retries

        cancels = CounterMetricFamily("reportline_cancels", "Cancelled tasks.", labels=["lane"])
        per_lane = _by_lane(Task.objects.filter(status=Status.CANCELLED))
        for lane in Lane.values:
            cancels.add_metric([lane], per_lane[lane])
        yield cancels

        timeouts = CounterMetricFamily(
            "reportline_timeouts",
            "Tasks failed by a time limit: the task deadline (timeout) or no text (stalled).",
            labels=["lane"],
        )
        per_lane = _by_lane(
            Task.objects.filter(status=Status.FAILED, error_type__in=TIMEOUT_ERRORS)
        )
        for lane in Lane.values:
            timeouts.add_metric([lane], per_lane[lane])
        yield timeouts

    def _gauges(self):
        depth = GaugeMetricFamily(
            "reportline_queue_depth", "Tasks waiting to be claimed.", labels=["lane"]
        )
        per_lane = _by_lane(Task.objects.filter(status=Status.QUEUED))
        for lane in Lane.values:
            depth.add_metric([lane], per_lane[lane])
        yield depth
        leases = GaugeMetricFamily(
            "reportline_live_leases", "Attempts running under a live lease.", labels=["lane"]
        )
        per_lane = _by_lane(Task.objects.live_leases())
        for lane in Lane.values:
            leases.add_metric([lane], per_lane[lane])
        yield leases


def _by_lane(queryset, lane_field: str = "lane") -> dict[str, int]:
    counts = defaultdict(int)
    for lane, n in queryset.values_list(lane_field).annotate(n=Count("pk")).order_by():
        counts[lane] = n
    return counts


registry = CollectorRegistry(auto_describe=False)
registry.register(DatabaseCollector())
