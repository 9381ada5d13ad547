"""The log lines of a task's life that need its row: its end, and a reaped attempt."""

from __future__ import annotations

import logging

from reports.models import CompiledRead, ErrorType, Task
from reports.observability.logs import log_event

log = logging.getLogger("reports.tasks")


def task_fields(task: Task) -> dict:
    """The fields every log line about a whole task carries."""
    return {
        "task_id": str(task.pk),
        "trace_id": task.trace_id,
        "status": task.status,
        "lane": task.lane,
    }


def ms_between(start, end) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000, 1)


def log_task_ended(task_id) -> None:
    """Log `task.ended` for a task that just reached a terminal status."""
    task = _ENDED.instance(task_id)
    log_event(
        log,
        "task.ended",
        **task_fields(task),
        request_id=task.request_id,
        error_type=task.error_type or None,
        attempts=task.attempt_count,
        queue_ms=task.queue_ms,
        first_text_ms=task.first_text_ms,
        duration_ms=task.duration_ms,
        result_id=str(task.result_id) if task.result_id else None,
        cost_status=task.cost_status,
    )


# Every task's end logs it: compiled once (reports.models.compiled).
_ENDED = CompiledRead(
    lambda task_id: Task.objects.defer("report_html", "instructions").filter(pk=task_id),
    lambda task_id: [(Task._meta.pk, task_id)],
)


def log_reaped(
    task_id,
    attempt_id,
    number: int,
    to: str,
    status: str = "interrupted",
    error_type: str = ErrorType.WORKER_LOST,
) -> None:
    """Log the end of an attempt whose worker stopped answering (and the task's, if it ended)."""
    log_event(
        log,
        "attempt.ended",
        task_id=str(task_id),
        attempt_id=str(attempt_id),
        attempt=number,
        status=status,
        task_status=to,
        error_type=error_type,
        usage_source="missing",
    )
