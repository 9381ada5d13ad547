"""Task admin, plan part: the passages a task read and the calls of its plan, in order,
with the final call that wrote the report. Three queries whatever the plan's size."""

from __future__ import annotations

from django.utils.html import format_html, format_html_join

from reports.admin.inlines import format_cost
from reports.models import Attempt, PlanCall, Task
from reports.observability.charts import format_ms

UNSETTLED = (PlanCall.CallStatus.PENDING, PlanCall.CallStatus.RUNNING)  # no cost yet
COLUMNS = (
    "call",
    "kind",
    "reads",
    "passages",
    "status",
    "notes by",
    "reused",
    "start",
    "duration",
    "first text",
    "usage in / out",
    "cost",
)


def plan_label(plan: dict | None) -> str:
    """Return "12 parts", "12 parts, 2 rounds", or "" for a one-call (or unplanned) task."""
    parts = (plan or {}).get("parts") or 0
    if not parts:
        return ""
    rounds = plan.get("rounds") or 0
    words = f"{parts} part{'s' if parts != 1 else ''}"
    return words + (f", {rounds} round{'s' if rounds != 1 else ''}" if rounds else "")


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


def _passages(call: PlanCall) -> str:
    if call.first_passage is None:
        return "-"
    if call.last_passage in (None, call.first_passage):
        return f"S{call.first_passage}"
    return f"S{call.first_passage} to S{call.last_passage}"


def _since(task: Task, moment) -> str:
    return (
        "-"
        if moment is None
        else "+" + format_ms((moment - task.created_at).total_seconds() * 1000)
    )


def _reused(call: PlanCall, current_attempt: int) -> bool:
    """Whether an earlier attempt than the task's latest wrote the call's notes."""
    return call.attempt_number is not None and call.attempt_number < current_attempt


def call_rows(task: Task, calls: list[PlanCall], current_attempt: int) -> list[tuple]:
    rows = []
    for call in calls:
        rows.append(
            (
                call.key,
                call.kind,
                call.label or "-",
                _passages(call),
                call.status + (f" ({call.error_type})" if call.error_type else ""),
                "-" if call.attempt_number is None else f"attempt {call.attempt_number}",
                "reused" if _reused(call, current_attempt) else "-",
                _since(task, call.started_at),
                format_ms(call.duration_ms),
                format_ms(call.first_text_ms),
                f"{_count(call.input_tokens)} / {_count(call.output_tokens)}",
                "-" if call.status in UNSETTLED else format_cost(call.cost_micros),
            )
        )
    return rows


def final_row(task: Task, attempt: Attempt | None) -> tuple:
    """The call that writes the report: the generate stage of the task's latest attempt."""
    if attempt is None:
        return ("final", "report", "all the notes", "-", "not started", *["-"] * 7)
    return (
        "final",
        "report",
        "all the notes",
        "-",
        attempt.status + (f" ({attempt.error_type})" if attempt.error_type else ""),
        f"attempt {attempt.number}",
        "-",
        _since(task, attempt.started_at),
        format_ms((attempt.stage_ms or {}).get("generate")),
        format_ms(attempt.first_text_ms),
        f"{_count(attempt.input_tokens)} / {_count(attempt.output_tokens)}",
        format_cost(attempt.cost_micros),
    )


def plan_table(task: Task) -> str:
    """The plan of `task` as an HTML table, or a line saying it needed one call."""
    passages = task.passages.count()
    # Notes can be long and the table does not show them.
    calls = list(task.plan_calls.order_by("position").defer("notes"))
    if not calls:
        if task.plan is None:
            return format_html("{} passages; no plan yet.", passages) if passages else "-"
        return format_html("{} passages, read in one call.", passages)
    attempt = (
        task.attempts.order_by("-number")
        .only(
            "number",
            "status",
            "error_type",
            "started_at",
            "stage_ms",
            "first_text_ms",
            "input_tokens",
            "output_tokens",
            "cost_micros",
        )
        .first()
    )
    current = attempt.number if attempt else 0
    rows = [*call_rows(task, calls, current), final_row(task, attempt)]
    reused = sum(1 for call in calls if _reused(call, current))
    summary = format_html(
        "{} passages, {} · {} calls and the final one · {} reused by attempt {}",
        passages,
        plan_label(task.plan) or f"{len(calls)} calls",
        len(calls),
        reused,
        current or "-",
    )
    return format_html(
        '<p data-plan-summary>{}</p><table class="plan-calls" data-plan-calls>'
        "<thead><tr>{}</tr></thead><tbody>{}</tbody></table>",
        summary,
        format_html_join("", "<th>{}</th>", ((c,) for c in COLUMNS)),
        format_html_join(
            "",
            "<tr data-plan-call>" + "<td>{}</td>" * len(COLUMNS) + "</tr>",
            rows,
        ),
    )
