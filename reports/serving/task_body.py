"""A task as the API shows it (docs/api.md, "Task body"): the JSON API answers with it, and
a webhook carries it when the task ends."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from django.db.models.functions import Length
from django.urls import reverse

from reports import events
from reports.models import Attempt, CompiledRead, Status, Task, TaskEvent

INCOMPLETE = {Status.FAILED, Status.CANCELLED, Status.RECONCILIATION_REQUIRED}


def task_body(task: Task) -> dict:
    return task_bodies([task])[0]


def task_bodies(tasks: list[Task]) -> list[dict]:
    """Return the tasks' bodies in a fixed number of queries, however many tasks there are.

    Attempts come in one query (their text counted in the database, not loaded), the
    streamed length of attempts still running in one more; a task read with
    `with_queue_position()` brings its place in line along.
    """
    numbered = defaultdict(list)
    for attempt in _ATTEMPTS.instances([task.pk for task in tasks]) if tasks else ():
        numbered[attempt.task_id].append(attempt)
    for task in tasks:
        task.numbered_attempts = numbered[task.pk]
    running = [t.pk for t in tasks if t.numbered_attempts and not t.numbered_attempts[-1].ended_at]
    streamed = TaskEvent.objects.text_lengths(running) if running else {}
    bodies = []
    for task in tasks:
        last = task.numbered_attempts[-1] if task.numbered_attempts else None
        if last is None:
            text_length = 0
        elif last.ended_at is not None:
            text_length = last.text_length
        else:
            text_length = streamed.get((str(task.pk), last.number), 0)
        bodies.append(_body(task, task.numbered_attempts, text_length))
    return bodies


# Every answer about a task reads its attempts (the answer to an upload, each poll of a
# task): compiled once for each number of tasks, at most a page's.
_ATTEMPTS = CompiledRead(
    lambda task_ids: (
        Attempt.objects.filter(task_id__in=task_ids)
        .order_by("task_id", "number")
        .defer("text")
        .annotate(text_length=Length("text"))
    ),
    lambda task_ids: [(Attempt._meta.get_field("task"), task_id) for task_id in task_ids],
    shape=len,
)


def _body(task: Task, attempts: list[Attempt], text_length: int) -> dict:
    last = attempts[-1] if attempts else None
    usage = None
    if last is not None and last.usage_source:
        usage = {
            "input_tokens": last.input_tokens,
            "output_tokens": last.output_tokens,
            "cached_tokens": last.cached_tokens,
            "usage_source": last.usage_source,
        }
    return {
        "task_id": str(task.pk),
        "status": task.status,
        "lane": task.lane,
        "url": reverse("task", args=[task.pk]),
        "events_url": reverse("api-task-events", args=[task.pk]),
        "ws_url": f"/ws/tasks/{task.pk}/",  # a Channels route: reverse() does not know it
        "created_at": task.created_at.isoformat(),
        "queue_position": task.queue_position(),
        "attempts": [
            {
                "attempt_id": str(a.pk),
                "number": a.number,
                "status": a.status,
                "error_type": a.error_type or None,
                "started_at": a.started_at.isoformat(),
                "ended_at": a.ended_at.isoformat() if a.ended_at else None,
            }
            for a in attempts
        ],
        "text_length": text_length,
        "partial": task.status in INCOMPLETE and text_length > 0,
        "error": (
            {"type": task.error_type, "message": task.user_message} if task.error_type else None
        ),
        "result": (
            {
                "result_id": str(task.result_id),
                "download_url": reverse("api-task-result", args=[task.pk]),
                "sha256": task.result_sha256,
                "bytes": task.result_bytes,
            }
            if task.status == Status.SUCCEEDED
            else None
        ),
        "timings": {
            "queue_ms": task.queue_ms,
            "first_text_ms": task.first_text_ms,
            "frontend_first_text_ms": task.frontend_first_text_ms,
            "duration_ms": task.duration_ms,
        },
        "usage": usage,
        "cost_status": task.cost_status,
    }


def progress_of(task: Task, text_length: int) -> dict | None:
    """Return the latest `progress` of a running task's current attempt, as its event says
    it (`GET /api/tasks/<id>?include=progress`, docs/api.md): what the task page shows
    before the report's text arrives. None when there is none, once that text is arriving
    (`text_length`), or when the task is not running. Read from its events but the text."""
    if task.status != Status.RUNNING or text_length > 0:
        return None
    stored = TaskEvent.objects.filter(task_id=task.pk).without_text().order_by("seq")
    progress = events.fold(stored.as_events()).progress
    return None if progress is None else dataclasses.asdict(progress)
