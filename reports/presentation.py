"""What the pages say about a task: status wording, wait estimates, the page snapshot.

Read-only: everything here reads tasks, attempts and events and puts them in words; the
pages and the WebSocket consumer call it, and nothing here writes.

A page is a snapshot at one seq: the task row and every event up to its `last_seq`
(both are written in the same transaction, so the pair is always consistent). The
live stream then continues after that seq.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import DurationField, ExpressionWrapper, F, Sum
from django.db.models.functions import Now

from reports import budgets
from reports.models import (
    PROVIDER_FAILURES,
    TERMINAL,
    Attempt,
    CostStatus,
    ErrorType,
    Status,
    Task,
    TaskEvent,
)

WAIT_SAMPLE = 20  # succeeded tasks of the lane that the wait estimate is based on

LABELS = {
    Status.QUEUED: "Queued",
    Status.RUNNING: "Running",
    Status.FINALIZING: "Finalizing",
    Status.SUCCEEDED: "Succeeded",
    Status.FAILED: "Failed",
    Status.CANCELLED: "Cancelled",
    Status.RECONCILIATION_REQUIRED: "Outcome unknown",
}

# Why a task ended without a report, in plain words: (short, for the status line; long).
FAILURES = {
    ErrorType.PROVIDER_ERROR: (
        "the provider dropped the connection",
        "The provider dropped the connection before the report was finished.",
    ),
    ErrorType.PROVIDER_AUTH: (
        "the provider refused our credentials",
        "The provider refused our credentials, so no report could be written.",
    ),
    ErrorType.PROVIDER_REJECTED: (
        "the provider refused the request",
        "The provider refused the request.",
    ),
    ErrorType.PROVIDER_QUOTA: (
        "the provider's spending limit was reached",
        "The provider's spending limit was reached.",
    ),
    ErrorType.RATE_LIMITED: (
        "the provider kept asking us to wait",
        "The provider kept asking us to wait, for longer than the retries allow.",
    ),
    ErrorType.STREAM_TRUNCATED: (
        "the stream ended early",
        "The stream ended early: the provider stopped before the report was complete.",
    ),
    ErrorType.EMPTY_OUTPUT: ("no text", "The provider finished without writing any text."),
    ErrorType.STALLED: (ErrorType.STALLED, "The provider stalled: no text arrived for too long."),
    ErrorType.TIMEOUT: ("timed out", "The report timed out: it ran past the task's time limit."),
    ErrorType.VALIDATION_FAILED: (
        "did not pass the checks",
        "The report was written in full but did not have the shape of a report (a title, "
        "a summary and at least one more section), so it was not saved.",
    ),
    ErrorType.SAVE_FAILED: ("could not be saved", "The report could not be saved."),
    ErrorType.INVALID_INPUT: ("the document could not be read", "The document could not be read."),
    ErrorType.BUDGET_EXHAUSTED: (
        "budget exhausted",
        "Your remaining budget cannot cover this report.",
    ),
    ErrorType.WORKER_LOST: (
        "the worker stopped responding",
        "The worker writing the report stopped responding, and no attempts were left.",
    ),
    ErrorType.WORKER_ERROR: (
        "an internal error",
        "Something went wrong on our side; the report stopped.",
    ),
}


def user_message(error_type: str, message: str, *, plain: bool = False) -> str:
    """Return the message a user is shown for a failure of this type: a provider's own
    words (`plain` false) are replaced by a plain sentence."""
    if error_type in PROVIDER_FAILURES and not plain:
        return FAILURES[error_type][1]
    return message


CANCELLED = "Cancelled by you."
UNKNOWN_OUTCOME = (
    "Outcome unknown — needs an admin. The provider may or may not have finished the "
    "request; an admin will check with the provider and resolve this task."
)


# --- status --------------------------------------------------------------------------


def status_of(event_type: str, data: dict) -> str:
    """Return the task status an event announces (`status` events name it in data)."""
    return data.get("status", "") if event_type == "status" else event_type


def estimated_wait_s(lane: str, position: int) -> float | None:
    """Estimate the wait: median run time of the lane's recent reports, times position over slots.

    None when the lane has no finished report to learn from yet.
    """
    rows = (
        Task.objects.filter(lane=lane, status=Status.SUCCEEDED, claimed_at__isnull=False)
        .order_by("-finished_at")
        .values_list("claimed_at", "finished_at")[:WAIT_SAMPLE]
    )
    durations = [(done - claimed).total_seconds() for claimed, done in rows if done]
    if not durations:
        return None
    slots = max(1, settings.REPORTS_LANE_LIMITS.get(lane, 1))
    return statistics.median(durations) * position / slots


def attempt_elapsed_ms(task_id, number: int) -> int | None:
    """Milliseconds since the attempt started, on the database's clock."""
    elapsed = (
        Attempt.objects.filter(task_id=task_id, number=number)
        .annotate(elapsed=ExpressionWrapper(Now() - F("started_at"), output_field=DurationField()))
        .values_list("elapsed", flat=True)
        .first()
    )
    return None if elapsed is None else max(0, int(elapsed.total_seconds() * 1000))


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def duration_words(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    if seconds < 90:
        return f"about {round(seconds)} s"
    return f"about {round(seconds / 60)} min"


def status_context(task: Task, data: dict, *, has_text: bool = False) -> dict[str, Any]:
    """Return what the status line shows for the status `data` announces.

    `data` is a status-bearing event's data with the status under "status"
    ({"status": "queued"} for a task that has no event yet); `has_text` says whether
    the running attempt has written text yet (the page updates that stage itself).
    """
    value = data.get("status") or Status.QUEUED
    attempt = int(data.get("attempt") or 0)
    context: dict[str, Any] = {
        "value": value,
        "label": LABELS.get(value, value),
        "detail": "",
        "attempt": attempt,
        "elapsed_ms": None,
        "stage": "",
    }
    if value == Status.QUEUED:
        context["detail"] = _queued_detail(task, data, attempt)
    elif value == Status.RUNNING:
        context["detail"] = "trying again" if attempt > 1 else ""
        context["stage"] = "writing" if has_text else "waiting"
        context["elapsed_ms"] = attempt_elapsed_ms(task.pk, attempt)
    elif value == Status.FINALIZING:
        context["detail"] = "checking and saving the report"
    elif value == Status.SUCCEEDED:
        context["detail"] = "the report was checked and saved"
    elif value == Status.FAILED:
        context["detail"] = FAILURES.get(data.get("error_type", ""), ("failed", ""))[0]
    elif value == Status.RECONCILIATION_REQUIRED:
        context["detail"] = "needs an admin"
    return context


def _queued_detail(task: Task, data: dict, attempt: int) -> str:
    position = task.queue_position()
    if position is None:  # claimed since the task was read: it is on its way
        return "starting now"
    wait = estimated_wait_s(task.lane, position)
    line = "next in line" if position == 1 else f"{ordinal(position)} in line"
    line += f", estimated wait {duration_words(wait)}" if wait is not None else ""
    if not attempt:
        return line
    after = data.get("retry_after_s")
    if after:
        why = f"trying again: the provider asked us to wait {after:g} s"
    elif "retry_after_s" in data:
        why = "trying again after a provider error"
    else:
        why = "starting again: the last try was interrupted"
    return f"{why}; {line}"


def incomplete_context(status: str, data: dict) -> dict[str, str] | None:
    """Return why a task ended without a report, in plain words; None when it succeeded.

    `data` is the terminal event's data, whose `partial` says whether text had arrived.
    """
    if status not in TERMINAL or status == Status.SUCCEEDED:
        return None
    message = data.get("message", "")
    if status == Status.CANCELLED:
        reason, message = CANCELLED, ""
    elif status == Status.RECONCILIATION_REQUIRED:
        reason = UNKNOWN_OUTCOME
    else:
        reason = FAILURES.get(data.get("error_type", ""), ("", "The report failed."))[1]
    if not data.get("partial"):
        partial = "No text arrived."
    elif data.get("error_type") == ErrorType.VALIDATION_FAILED:
        partial = "The text below arrived whole; it is shown as written, without formatting."
    else:
        partial = "The text below is what arrived before it stopped; it is incomplete."
    return {"reason": reason, "message": message, "partial": partial}


# CommonMark's backslash escapes: a backslash before ASCII punctuation.
_MARKDOWN_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def readable(text: str) -> str:
    """Return streamed Markdown as a reader sees it in plain text: no escape backslashes."""
    return _MARKDOWN_ESCAPE.sub(r"\1", text)


# --- the page snapshot ---------------------------------------------------------------


@dataclass
class EarlierAttempt:
    """An attempt that a later one replaced (docs/lifecycle.md: shown as its own, interrupted)."""

    number: int
    text: str


@dataclass
class Snapshot:
    """The task page's state at `seq`: every event up to it, folded."""

    seq: int
    status_data: dict
    attempt: int = 0
    text: str = ""
    earlier: list[EarlierAttempt] = field(default_factory=list)


def snapshot(task: Task) -> Snapshot:
    """Fold the task's events up to its `last_seq` into what the page shows."""
    events = TaskEvent.objects.filter(task_id=task.pk, seq__lte=task.last_seq).order_by("seq")
    texts: dict[int, list[str]] = {}
    status_data: dict = {"status": Status.QUEUED}
    attempt = 0
    for event_type, data in events.values_list("type", "data"):
        number = int(data.get("attempt") or 0)
        if event_type == "delta":
            texts.setdefault(number, []).append(data.get("text", ""))
            attempt = max(attempt, number)
            continue
        status_data = {**data, "status": status_of(event_type, data)}
        if status_data["status"] == Status.RUNNING:
            attempt = max(attempt, number)
    earlier = [
        EarlierAttempt(number, readable("".join(parts)))
        for number, parts in sorted(texts.items())
        if number < attempt and "".join(parts)
    ]
    return Snapshot(
        seq=task.last_seq,
        status_data=status_data,
        attempt=attempt,
        text=readable("".join(texts.get(attempt, []))),
        earlier=earlier,
    )


def task_title(task: Task) -> str:
    names = [d.name for d in task.documents.all()]
    if not names:
        return "Report"
    if len(names) == 1:
        return names[0]
    return f"{names[0]} and {len(names) - 1} more"


def download_name(task: Task) -> str:
    """Return the report's file name: the first document's, as `<document>-report.md`."""
    first = next(iter(task.documents.all()), None)
    stem = first.name.rsplit(".", 1)[0] if first is not None else ""
    stem = re.sub(r"[^\w.-]+", "-", stem).strip(".-")[:100]
    return f"{stem or 'report'}-report.md"


def page_context(task: Task) -> dict[str, Any]:
    """Return the task page's template context: the snapshot, status and outcome."""
    snap = snapshot(task)
    status = snap.status_data["status"]
    context = {
        "task": task,
        "title": task_title(task),
        "seq": snap.seq,
        "snapshot": snap,
        "terminal": status in TERMINAL,
    }
    context.update(outcome_context(task, snap.status_data))
    context["cost"] = cost_words(task)
    context["status"] = status_context(task, snap.status_data, has_text=bool(snap.text))
    return context


def outcome_context(task: Task, status_data: dict) -> dict[str, Any]:
    status = status_data["status"]
    succeeded = status == Status.SUCCEEDED
    return {
        "succeeded": succeeded,
        "active": status not in TERMINAL,
        "incomplete": incomplete_context(status, status_data),
        "partial": bool(status_data.get("partial")),
        "download_name": download_name(task),
        "report_html": task.report_html if succeeded else "",
        "late_cancel": succeeded and task.cancel_requested_at is not None,
        "cost": cost_words(task),  # settled in the same transaction as the end
    }


def last_status_data(task: Task, upto: int) -> dict:
    """Return the data of the last status-bearing event at or before seq `upto`."""
    for event_type, data in (
        TaskEvent.objects.filter(task_id=task.pk, seq__lte=upto)
        .exclude(type="delta")
        .order_by("-seq")
        .values_list("type", "data")[:1]
    ):
        return {**data, "status": status_of(event_type, data)}
    return {"status": Status.QUEUED}


def still_queued(task: Task) -> bool:
    return Task.objects.filter(pk=task.pk, status=Status.QUEUED).exists()


def home_rows(user, limit: int = 50) -> list[dict[str, Any]]:
    """Return the user's newest tasks with a one-line status each, for the home page."""
    rows = []
    tasks = Task.objects.for_user(user).with_queue_position().prefetch_related("documents")[:limit]
    for task in tasks:
        detail = ""
        if task.status == Status.QUEUED:
            detail = f"{ordinal(task.queue_position())} in line"
        elif task.status == Status.RUNNING:
            detail = "writing"
        elif task.status == Status.FAILED:
            detail = FAILURES.get(task.error_type, ("", ""))[0]
        rows.append(
            {
                "task": task,
                "title": task_title(task),
                "label": LABELS.get(task.status, task.status),
                "detail": detail,
            }
        )
    return rows


def any_active(rows: Iterable[dict]) -> bool:
    return any(row["task"].status not in TERMINAL for row in rows)


# --- money ---------------------------------------------------------------------------


def budget_context(budget) -> dict[str, str]:
    """Return the user's budget in dollars, for the upload form: what is left, and what is
    held, split into reports still running and outcomes awaiting an admin's check."""
    awaiting = (
        Task.objects.filter(
            owner_id=budget.user_id, cost_status=CostStatus.PENDING_RECONCILIATION
        ).aggregate(held=Sum("reserved_micros"))["held"]
        or 0
    )
    running = max(0, budget.reserved_micros - awaiting)
    return {
        "remaining": budgets.usd(max(0, budget.remaining_micros)),
        "limit": budgets.usd(budget.limit_micros),
        "running": budgets.usd(running) if running else "",
        "awaiting": budgets.usd(awaiting) if awaiting else "",
    }


def cost_words(task: Task) -> str:
    """Return what the task cost, or holds, in plain words; "" before budgets existed."""
    if task.cost_status == CostStatus.RESERVED:
        return f"up to {budgets.usd(task.reserved_micros)} reserved from your budget"
    if task.cost_status == CostStatus.SETTLED:
        return f"cost {budgets.usd(task.cost_micros or 0)}"
    if task.cost_status == CostStatus.RELEASED:
        return "cost nothing"
    if task.cost_status == CostStatus.PENDING_RECONCILIATION:
        return (
            f"cost not yet known: {budgets.usd(task.reserved_micros)} stays reserved "
            "until an administrator settles it"
        )
    return ""
