"""The JSON API of docs/api.md (its event stream is `reports.streaming.sse`)."""

from __future__ import annotations

import json
import logging
import math

from django.db.models import F
from django.db.models.functions import Now
from django.http import (
    HttpRequest,
    HttpResponse,
    JsonResponse,
)
from django.http.request import RawPostDataException
from django.urls import reverse

from reports import exports, lifecycle, presentation, submissions
from reports.auth import (
    ApiError,
    api_view,
    owned_task,
    raise_if_upload_stopped,
    storage_unavailable,
)
from reports.models import TERMINAL, Status, Task
from reports.observability import tracing
from reports.serving import download_names, paging
from reports.serving.admissions import admits_tasks
from reports.serving.task_body import progress_of, task_bodies, task_body
from reports.submissions import form as submission_form

log = logging.getLogger(__name__)
# The page's first-text time counts from the click, before the upload: the task's age when
# the time is reported, plus this for the upload itself, bounds it; an hour always does.
UPLOAD_ALLOWANCE_MS = 60_000
MAX_FIRST_TEXT_MS = 3_600_000


@admits_tasks  # a POST takes the admission lock: a few at once per process
@api_view({"GET", "POST"})
def tasks(request: HttpRequest, user) -> JsonResponse:
    if request.method == "POST":
        return create_task(request, user)
    number = paging.page_number(request.GET.get("page"))
    if number is None:
        raise ApiError(400, "invalid_request", paging.OUT_OF_RANGE)
    page = paging.newest_first(Task.objects.for_user(user).with_queue_position(), number)
    return JsonResponse(
        {
            "tasks": task_bodies(page.tasks),
            "next": f"{reverse('api-tasks')}?page={number + 1}" if page.has_older else None,
        }
    )


def create_task(request: HttpRequest, user) -> JsonResponse:
    submission = submission_form.read_submission(request, user)
    # With reuse=1, an earlier report of the same documents is offered at once, reserving
    # nothing; without it a new task is always created (docs/api.md).
    earlier = submissions.earlier_result(user, submission)
    if earlier is not None:
        response = JsonResponse(task_body(earlier), status=200)
        response["Location"] = reverse("api-task", args=[earlier.pk])
        response["Reused-Result"] = "true"
        return response
    return _submitted(request, user, submission)


def _submitted(request: HttpRequest, user, submission: submissions.Submission) -> JsonResponse:
    with tracing.admission(request):
        task, replayed = submissions.submit(user, submission)
    # What the database set (its clock's created_at, a status the worker may have moved
    # on already) and the task's place in line, in one read.
    task = Task.objects.placed(task.pk)
    response = JsonResponse(task_body(task), status=200 if replayed else 201)
    response["Location"] = reverse("api-task", args=[task.pk])
    if replayed:
        response["Idempotent-Replayed"] = "true"
    return response


@api_view({"POST"})
def retry(request: HttpRequest, user, task_id) -> JsonResponse:
    """Start a new task from an ended task's stored documents; the old task stays as it was."""
    task = owned_task(user, task_id)
    key = submission_form.read_idempotency_key(request)
    raw = request.POST.get("instructions")
    # A form the upload limits stopped lost what came after the cut: maybe the instructions.
    raise_if_upload_stopped(request)
    submission_form.refuse_text_fields_sent_as_files(request)
    instructions = None if raw is None else submission_form.read_instructions(raw)
    return _submitted(request, user, submissions.resubmission(task, key, instructions))


@api_view({"GET"})
def task_detail(request: HttpRequest, user, task_id) -> JsonResponse:
    task = owned_task(user, task_id)
    include = request.GET.get("include")
    if include not in (None, "progress"):
        raise ApiError(400, "invalid_request", "include may only be progress.")
    body = task_body(task)
    if include == "progress":
        # Asked for: a client that polls sees how far a plan, an OCR or the model's
        # reading has come, which otherwise only the event stream says.
        body["progress"] = progress_of(task, body["text_length"])
    return JsonResponse(body)


@api_view({"POST"})
def cancel(request: HttpRequest, user, task_id) -> JsonResponse:
    task = owned_task(user, task_id)
    if not lifecycle.cancel_task(task):
        raise ApiError(409, "task_finished", f"The task already ended: {task.status}.")
    task.refresh_from_db()
    return JsonResponse(task_body(task), status=202)


@api_view({"GET"})
def result(request: HttpRequest, user, task_id) -> HttpResponse:
    task = owned_task(user, task_id)
    name = request.GET.get("format", "md")
    fmt = exports.FORMATS.get(name)
    if fmt is None:
        raise ApiError(
            400, "invalid_request", f"format must be one of {', '.join(exports.FORMATS)}."
        )
    with_passages = request.GET.get("passages", "0")
    if with_passages not in ("0", "1"):
        raise ApiError(400, "invalid_request", "passages must be 0 or 1.")
    if task.status in TERMINAL and task.status != Status.SUCCEEDED:
        raise ApiError(404, "not_found", f"There is no report: the task ended {task.status}.")
    if task.status != Status.SUCCEEDED:
        raise ApiError(404, "not_found", f"The report is not ready yet: the task is {task.status}.")
    try:
        report = exports.exported(task, name, with_passages=with_passages == "1")
    except OSError:
        raise storage_unavailable("report store") from None
    except exports.ConversionFailed as exc:
        log.warning("task %s: converting its report to %s failed: %s", task.pk, name, exc.detail)
        retry = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None
        raise ApiError(exc.status, "conversion_failed", exc.message, retry) from None
    file_name = download_names.report_file_name(task, fmt.extension)
    return download_names.download(report, fmt.content_type, file_name)


def task_age_ms(task: Task) -> float:
    """Return how long ago the task was submitted, by the database's clock (as created_at)."""
    age = Task.objects.filter(pk=task.pk).annotate(age=Now() - F("created_at"))
    return age.values_list("age", flat=True).get().total_seconds() * 1000


@api_view({"GET"})
def source(request: HttpRequest, user, task_id, passage_id: str) -> JsonResponse:
    passage = presentation.source_passage(owned_task(user, task_id), passage_id)
    if passage is None:
        # The caller's own task: saying the passage is what is missing tells them nothing
        # they do not know, where "No such task." sent them to check the task's id.
        raise ApiError(404, "not_found", "This task has no such passage.")
    return JsonResponse(
        {
            "id": passage.passage_id,
            "document": passage.document,
            "section": passage.section or None,
            "page": passage.page,
            "text": passage.text,
        }
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
    bound = min(MAX_FIRST_TEXT_MS, task_age_ms(task) + UPLOAD_ALLOWANCE_MS)
    if value > bound:
        raise ApiError(
            400,
            "invalid_request",
            f"frontend_first_text_ms is more than this task has existed ({bound:.0f} ms at most).",
        )
    Task.objects.filter(pk=task.pk, frontend_first_text_ms__isnull=True).update(
        frontend_first_text_ms=value
    )
    return HttpResponse(status=204)
