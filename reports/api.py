"""The JSON API of docs/api.md (its event stream is `reports.streaming.sse`)."""

from __future__ import annotations

import json
import math

from django.http import (
    FileResponse,
    HttpRequest,
    HttpResponse,
    JsonResponse,
)
from django.http.request import RawPostDataException
from django.urls import reverse

from reports import lifecycle, presentation, storage, submissions
from reports.auth import ApiError, api_view, owned_task
from reports.models import Status, Task, TaskEvent
from reports.observability import tracing

PAGE_SIZE = 50
INCOMPLETE = {Status.FAILED, Status.CANCELLED, Status.RECONCILIATION_REQUIRED}


def current_text(task: Task) -> str:
    """Return the text of the task's current attempt (the report, once it succeeded)."""
    attempt = task.current_attempt
    if attempt is None:
        return ""
    if attempt.ended_at is not None:
        return attempt.text
    return TaskEvent.objects.attempt_text(task.pk, attempt.number)


def task_body(task: Task) -> dict:
    attempts = list(task.attempts.order_by("number"))
    text_length = len(current_text(task))
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
        "url": f"/tasks/{task.pk}/",
        "events_url": f"/api/tasks/{task.pk}/events",
        "ws_url": f"/ws/tasks/{task.pk}/",
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
            {"type": task.error_type, "message": task.error_message} if task.error_type else None
        ),
        "result": (
            {
                "result_id": str(task.result_id),
                "download_url": f"/api/tasks/{task.pk}/result",
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


@api_view({"GET", "POST"})
def tasks(request: HttpRequest, user) -> JsonResponse:
    if request.method == "POST":
        return create_task(request, user)
    try:
        page = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        raise ApiError(400, "invalid_request", "page must be a positive integer.") from None
    start = (page - 1) * PAGE_SIZE
    # created_at has millisecond resolution on SQLite: the pk breaks ties, so that pages
    # of the same list neither repeat nor skip a task.
    newest_first = Task.objects.for_user(user).order_by("-created_at", "-pk")
    rows = list(newest_first[start : start + PAGE_SIZE + 1])
    more = len(rows) > PAGE_SIZE
    return JsonResponse(
        {
            "tasks": [task_body(t) for t in rows[:PAGE_SIZE]],
            "next": f"{reverse('api-tasks')}?page={page + 1}" if more else None,
        }
    )


def create_task(request: HttpRequest, user) -> JsonResponse:
    submission = submissions.read_submission(request)
    # With reuse=1, an earlier report of the same documents is offered at once, reserving
    # nothing; without it a new task is always created (docs/api.md).
    earlier = submissions.earlier_result(user, submission)
    if earlier is not None:
        response = JsonResponse(task_body(earlier), status=200)
        response["Location"] = f"/api/tasks/{earlier.pk}"
        response["Reused-Result"] = "true"
        return response
    return _submitted(request, user, submission)


def _submitted(request: HttpRequest, user, submission: submissions.Submission) -> JsonResponse:
    with tracing.admission(request):
        task, replayed = submissions.submit(user, submission)
    task.refresh_from_db()
    response = JsonResponse(task_body(task), status=200 if replayed else 201)
    response["Location"] = f"/api/tasks/{task.pk}"
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response


@api_view({"POST"})
def retry(request: HttpRequest, user, task_id) -> JsonResponse:
    """Start a new task from an ended task's stored documents; the old task stays as it was."""
    task = owned_task(user, task_id)
    key = submissions.read_idempotency_key(request)
    raw = request.POST.get("instructions")
    instructions = None if raw is None else submissions.read_instructions(raw)
    return _submitted(request, user, submissions.resubmission(task, key, instructions))


@api_view({"GET"})
def task_detail(request: HttpRequest, user, task_id) -> JsonResponse:
    return JsonResponse(task_body(owned_task(user, task_id)))


@api_view({"POST"})
def cancel(request: HttpRequest, user, task_id) -> JsonResponse:
    task = owned_task(user, task_id)
    if not lifecycle.cancel_task(task):
        raise ApiError(409, "task_finished", f"The task already ended: {task.status}.")
    task.refresh_from_db()
    return JsonResponse(task_body(task), status=202)


@api_view({"GET"})
def result(request: HttpRequest, user, task_id) -> FileResponse:
    task = owned_task(user, task_id)
    if task.status != Status.SUCCEEDED:
        raise ApiError(404, "not_found", "The report is not ready: the task has not succeeded.")
    return FileResponse(
        storage.result_path(task.result_id).open("rb"),
        as_attachment=True,
        filename=presentation.download_name(task),
        content_type="text/markdown; charset=utf-8",
    )


@api_view({"POST"})
def timing(request: HttpRequest, user, task_id) -> HttpResponse:
    task = owned_task(user, task_id)
    try:
        value = json.loads(request.body or b"null")["frontend_first_text_ms"]
    except (ValueError, TypeError, KeyError, RawPostDataException):
        # RawPostDataException: a form body, already parsed by a session caller's CSRF check.
        value = None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ApiError(
            400, "invalid_request", 'Send {"frontend_first_text_ms": <non-negative number>}.'
        )
    Task.objects.filter(pk=task.pk, frontend_first_text_ms__isnull=True).update(
        frontend_first_text_ms=value
    )
    return HttpResponse(status=204)
