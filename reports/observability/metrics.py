"""Prometheus metrics, derived from the database at scrape time.

Workers run in other processes than the web process that is scraped, so counters kept
in the web process's memory would miss their work, and every restart would reset them.
The task and attempt tables already hold every figure, so this collector computes the
histograms, counters and gauges from them at each scrape (one pass over the ended
tasks and attempts, and a few counts): correct across any number of processes and
restarts, with nothing to keep in step. Only ended tasks and attempts are counted in
histograms and counters (their figures no longer change, so the series only grow). Ids
never become labels: the labels are lane, outcome, error type and stage, a small set.

The event loop's lag and the database queue's wait are the exception: they are figures
of the scraped process alone, kept in its memory (`reports.observability.loop_lag`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Count, Q
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from reports.models import (
    STAGES,
    TERMINAL,
    Attempt,
    AttemptStatus,
    CircuitState,
    Lane,
    ProviderCircuit,
    Status,
    Task,
)
from reports.models.breaker import provider_name
from reports.observability import loop_lag
from reports.observability.latency import TIMEOUT_ERRORS
from reports.providers import concurrency

# Seconds: from a fast parse (5 ms) to a long report (30 min).
BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
ENDED_ATTEMPT = ~Q(status__in=[AttemptStatus.RUNNING, AttemptStatus.FINALIZING])
ROWS_AT_ONCE = 2000

# name, help, the instant (after created_at) the histogram measures up to
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


@dataclass
class Histogram:
    """One label set's observations, bucketed as Prometheus wants them."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_S) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(BUCKETS_S, seconds)] += 1  # the first bucket with v <= le
        self.total += seconds

    def buckets(self) -> list[tuple[str, int]]:
        cumulative, running = [], 0
        for bound, count in zip((*(f"{b:g}" for b in BUCKETS_S), "+Inf"), self.counts, strict=True):
            running += count
            cumulative.append((bound, running))
        return cumulative


def _family(name: str, doc: str, labels: list[str], found: dict) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for key in sorted(found):
        family.add_metric(list(key), found[key].buckets(), sum_value=found[key].total)
    return family


class DatabaseCollector:
    """Collect Reportline's metrics from the task table (see the module docstring)."""

    def collect(self):
        ended = Task.objects.filter(status__in=TERMINAL)
        yield from self._task_histograms(ended)
        yield self._stage_histogram()
        yield from self._counters(ended)
        yield from self._gauges()
        yield from self._circuit()

    def _task_histograms(self, ended):
        # One pass over the ended tasks' instants: the same on SQLite and PostgreSQL,
        # and cheaper than one aggregate per bucket (see docs/observability.md).
        found = {name: defaultdict(Histogram) for name, _, _ in TASK_HISTOGRAMS}
        instants = [instant for _, _, instant in TASK_HISTOGRAMS]
        rows = ended.values_list("lane", "status", "created_at", *instants)
        for lane, status, created, *ends in rows.iterator(chunk_size=ROWS_AT_ONCE):
            for (name, _, _), end in zip(TASK_HISTOGRAMS, ends, strict=True):
                if end is not None:
                    found[name][lane, status].observe((end - created).total_seconds())
        for name, doc, _ in TASK_HISTOGRAMS:
            yield _family(name, doc, ["lane", "outcome"], found[name])

    def _stage_histogram(self):
        found = defaultdict(Histogram)
        rows = Attempt.objects.filter(ENDED_ATTEMPT).values_list("task__lane", "status", "stage_ms")
        for lane, status, stage_ms in rows.iterator(chunk_size=ROWS_AT_ONCE):
            for stage, ms in stage_ms.items():
                if stage in STAGES:
                    found[stage, lane, status].observe(ms / 1000)
        return _family(
            "reportline_stage_seconds",
            "Duration of each stage of each ended attempt (outcome: the attempt's).",
            ["stage", "lane", "outcome"],
            found,
        )

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
        yield from _provider_gauges()


def _provider_gauges():
    """The provider's calls at once: the limit the workers keep to, and those under way."""
    limit = concurrency.limit()
    limit_gauge = GaugeMetricFamily(
        "reportline_provider_concurrency_limit",
        "Calls the provider is given at once (setting, server slots, adaptive); -1: no limit.",
    )
    limit_gauge.add_metric([], -1 if limit is None else limit)
    yield limit_gauge
    in_flight = GaugeMetricFamily(
        "reportline_provider_calls_in_flight", "Calls under way at the provider."
    )
    in_flight.add_metric([], concurrency.in_flight())
    yield in_flight

    def _circuit(self):
        """The provider's circuit (docs/providers.md): its state, its failures in a row,
        and how often it opened."""
        circuit = ProviderCircuit.objects.current()
        name = provider_name()
        now = CircuitState.CLOSED if circuit is None else circuit.state
        state = GaugeMetricFamily(
            "reportline_provider_circuit_state",
            "1 for the state the provider's circuit is in (closed, open, probing), else 0.",
            labels=["provider", "state"],
        )
        for value in CircuitState.values:
            state.add_metric([name, value], 1 if value == now else 0)
        yield state
        failures = GaugeMetricFamily(
            "reportline_provider_consecutive_failures",
            "Calls in a row that failed for the provider's own reasons.",
            labels=["provider"],
        )
        failures.add_metric([name], 0 if circuit is None else circuit.failures)
        yield failures
        opened = CounterMetricFamily(
            "reportline_provider_circuit_opened",
            "Times the provider's circuit opened (a failed probe opens it again).",
            labels=["provider"],
        )
        opened.add_metric([name], 0 if circuit is None else circuit.opened_total)
        yield opened


def _by_lane(queryset, lane_field: str = "lane") -> dict[str, int]:
    counts = defaultdict(int)
    for lane, n in queryset.values_list(lane_field).annotate(n=Count("pk")).order_by():
        counts[lane] = n
    return counts


registry = CollectorRegistry(auto_describe=False)
registry.register(DatabaseCollector())
for process_figure in (loop_lag.LOOP_LAG, loop_lag.DB_WAIT, loop_lag.STALLS):
    registry.register(process_figure)
