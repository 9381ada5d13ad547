"""Where one task's time went: its attempts' stages on one time axis from submit.

Each attempt is a row: the wait before it (the queue for the first attempt; for a
retry, from the previous attempt's end, `Retry-After` included), then its stages end
to end from the attempt's start, with a marker at its first text. What the stages do
not cover up to the attempt's end (the status writes between them) is drawn as
`other`, so nothing is hidden.

A planned task then has a row per call of its plan, on the same axis: the parts
(overlapping where they ran side by side), the rounds, then the final call that wrote
the report, from the latest call's end to the end of the last attempt's generate stage.
A call whose notes an earlier attempt wrote is drawn where that attempt ran it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q
from django.utils import timezone

from reports.models import STAGES, Attempt, Lane, PlanCall, Status, Task
from reports.observability.charts import Row, Segment, format_ms, waterfall_chart

SIDE_BY_SIDE_POOL = 200  # recent succeeded tasks the default "normal" and "slow" come from
STANDS_OUT = 2.0  # a figure at least this many times the normal task's…
STANDS_OUT_MIN_MS = 100  # …and at least this much longer, is highlighted


def _ms(start, end) -> float:
    return (end - start).total_seconds() * 1000


@dataclass
class TaskWaterfall:
    task: Task
    rows: list[Row]
    axis_ms: float
    figures: dict[str, float | None]  # queue, each stage (summed over attempts), first text, total

    def chart(self, axis_ms: float | None = None) -> str:
        return waterfall_chart(
            self.rows, axis_ms or self.axis_ms, f"Waterfall of task {self.task.pk}"
        )


def task_waterfall(task: Task) -> TaskWaterfall:
    attempts = list(
        Attempt.objects.filter(task=task)
        .order_by("number")
        .only(
            "number", "status", "error_type", "started_at", "ended_at", "stage_ms", "first_text_ms"
        )
    )
    t0 = task.created_at
    rows: list[Row] = []
    stage_totals: dict[str, float] = {}
    waited_since = t0
    for attempt in attempts:
        start = _ms(t0, attempt.started_at)
        wait_label = "queue" if attempt.number == 1 else "wait before retry"
        row = Row(f"attempt {attempt.number} · {attempt.error_type or attempt.status}")
        row.segments.append(
            Segment(
                "queue",
                _ms(t0, waited_since),
                start,
                f"{wait_label}: {format_ms(start - _ms(t0, waited_since))}",
            )
        )
        cursor = start
        for stage in [s for s in STAGES if s in attempt.stage_ms] + sorted(
            set(attempt.stage_ms) - set(STAGES)
        ):
            took = attempt.stage_ms[stage]
            row.segments.append(
                Segment(stage, cursor, cursor + took, f"{stage}: {format_ms(took)}")
            )
            stage_totals[stage] = stage_totals.get(stage, 0.0) + took
            cursor += took
        if attempt.ended_at is not None:
            end = _ms(t0, attempt.ended_at)
            if end - cursor >= 1:
                row.segments.append(
                    Segment("other", cursor, end, f"between stages: {format_ms(end - cursor)}")
                )
            waited_since = attempt.ended_at
        if attempt.first_text_ms is not None:
            row.markers.append(
                (
                    start + attempt.first_text_ms,
                    f"first text {format_ms(attempt.first_text_ms)} after the attempt began",
                )
            )
        rows.append(row)
    rows.extend(plan_rows(task, attempts[-1] if attempts else None))
    if not attempts:
        end = task.duration_ms if task.finished_at else _ms(t0, task.created_at)
        rows.append(Row("queue", [Segment("queue", 0, end or 0, f"queue: {format_ms(end)}")]))
    axis = max([row.end_ms for row in rows] + [task.duration_ms or 0.0])
    figures: dict[str, float | None] = {"queue": task.queue_ms}
    figures.update({stage: stage_totals.get(stage) for stage in STAGES})
    figures["first text"] = task.first_text_ms
    figures["total"] = task.duration_ms
    return TaskWaterfall(task, rows, axis, figures)


def plan_rows(task: Task, last: Attempt | None) -> list[Row]:
    """One row per call of the task's plan that started, then the final call."""
    t0 = task.created_at
    calls = list(
        PlanCall.objects.filter(task=task, started_at__isnull=False)
        .order_by("position")
        .only(
            "key",
            "kind",
            "label",
            "status",
            "attempt_number",
            "started_at",
            "ended_at",
            "first_passage",
            "last_passage",
            "first_text_ms",
        )
    )
    rows = []
    for call in calls:
        start = _ms(t0, call.started_at)
        # A call still running is drawn up to now; one the task's end cut off, to that end.
        end = _ms(t0, call.ended_at or task.finished_at or timezone.now())
        reads = call.label or (
            f"S{call.first_passage} to S{call.last_passage}" if call.first_passage else ""
        )
        by = f"attempt {call.attempt_number}" if call.attempt_number else call.status
        row = Row(f"{call.key} · {by}")
        row.segments.append(
            Segment(
                call.kind,
                start,
                end,
                f"{call.key} ({reads}), {call.status}: {format_ms(end - start)}",
            )
        )
        if call.first_text_ms is not None:
            row.markers.append(
                (
                    start + call.first_text_ms,
                    f"first notes {format_ms(call.first_text_ms)} after the call began",
                )
            )
        rows.append(row)
    if not calls or last is None or "generate" not in last.stage_ms:
        return rows
    began = _ms(t0, last.started_at)
    before = sum(last.stage_ms.get(s, 0.0) for s in STAGES[: STAGES.index("generate")])
    generate_end = began + before + last.stage_ms["generate"]
    start = min(max(row.segments[0].end_ms for row in rows), generate_end)
    final = Row(f"final · attempt {last.number}")
    final.segments.append(
        Segment(
            "final",
            start,
            generate_end,
            f"the report from the notes: {format_ms(generate_end - start)}",
        )
    )
    if last.first_text_ms is not None:
        final.markers.append(
            (
                began + last.first_text_ms,
                f"first text {format_ms(last.first_text_ms)} after the attempt began",
            )
        )
    rows.append(final)
    return rows


@dataclass
class Comparison:
    columns: list[TaskWaterfall]
    axis_ms: float
    table: list[tuple[str, list[tuple[str, bool]]]]  # figure, [(shown value, stands out)]


def compare(tasks: list[Task]) -> Comparison:
    """Three (or any number of) tasks on one axis; figures far above the first's stand out."""
    columns = [task_waterfall(task) for task in tasks]
    axis = max(c.axis_ms for c in columns)
    table = []
    for name in columns[0].figures:
        base = columns[0].figures[name]
        cells = []
        for i, column in enumerate(columns):
            value = column.figures[name]
            stands_out = (
                i > 0
                and value is not None
                and value - (base or 0) >= STANDS_OUT_MIN_MS
                and (not base or value / base >= STANDS_OUT)
            )
            cells.append((format_ms(value), stands_out))
        table.append((name, cells))
    return Comparison(columns, axis, table)


def default_trio(lane: str | None = None) -> list[Task]:
    """Pick a normal, a slow and a failed task of one lane: the median and the slowest of
    the latest succeeded ones, and the latest failed one. Fewer when there are none."""
    ended = Task.objects.defer("report_html", "instructions")
    if lane is None:
        latest = ended.filter(status=Status.SUCCEEDED).only("lane").first()
        lane = latest.lane if latest else Lane.SHORT
    recent = list(
        ended.filter(status=Status.SUCCEEDED, lane=lane).order_by("-created_at")[:SIDE_BY_SIDE_POOL]
    )
    recent.sort(key=lambda t: t.duration_ms or 0)
    trio = []
    if recent:
        trio.append(recent[(len(recent) - 1) // 2])  # the lower median
        if len(recent) > 1:
            trio.append(recent[-1])
    failed = (
        ended.filter(Q(status=Status.FAILED) | Q(status=Status.RECONCILIATION_REQUIRED), lane=lane)
        .order_by("-created_at")
        .first()
    )
    if failed is not None:
        trio.append(failed)
    return trio
