"""The pages: the upload form with the user's reports, the live task page, and the source
passages its report cites."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import BadRequest
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST

from reports import budgets, presentation, submissions
from reports.auth import MB, ApiError
from reports.models import Task
from reports.parsers import SUPPORTED_EXTENSIONS
from reports.providers import SCENARIOS, provider_class
from reports.serving import paging
from reports.streaming.consumers import HEARTBEAT_S
from reports.submissions import form as submission_form


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    # The list pages as the API's does (reports.serving.paging): a page number that is not
    # one is the 400 page, a page past the last of the user's reports the 404 page.
    number = paging.page_number(request.GET.get("page"))
    if number is None:
        raise BadRequest(paging.OUT_OF_RANGE)
    page = paging.newest_first(Task.objects.for_user(request.user).with_queue_position(), number)
    if page.has_newer and not page.tasks:
        raise Http404("No such page of reports.")
    rows = presentation.home_rows(page.tasks)
    context = {"rows": rows, "page": page, "polling": presentation.any_active(rows)}
    if request.htmx:
        # The list polls itself, the page the user is on, while a report is on its way.
        response = render(request, "reports/home.html#task-list", context)
    else:
        context.update(
            # A fresh key per render: a double click or a resubmitted form makes one task.
            idempotency_key=str(uuid.uuid4()),
            # Offered only where the provider plays them: a real model ignores the choice.
            scenarios=SCENARIOS
            if settings.REPORTS_ALLOW_SCENARIOS and provider_class().plays_scenarios
            else (),
            max_files=settings.REPORTS_MAX_FILES,
            max_file_mb=f"{settings.REPORTS_MAX_FILE_MB:g}",
            max_request_mb=f"{settings.REPORTS_MAX_REQUEST_MB:g}",
            max_file_bytes=int(settings.REPORTS_MAX_FILE_MB * MB),
            max_request_bytes=int(settings.REPORTS_MAX_REQUEST_MB * MB),
            accept=",".join(SUPPORTED_EXTENSIONS),
            max_instructions=settings.REPORTS_MAX_INSTRUCTIONS_CHARS,
            budget=presentation.budget_context(budgets.budget_of(request.user)),
            plan_sizes=presentation.plan_sizes(),
        )
        response = render(request, "reports/home.html", context)
    patch_vary_headers(response, ["HX-Request"])
    return response


def owned_or_404(request: HttpRequest, task_id: uuid.UUID) -> Task:
    """The user's task; another user's is answered exactly as a missing one."""
    found = Task.objects.owned(request.user, task_id)
    if found is None:
        raise Http404("No such task.")
    return found


@login_required
@require_GET
def task(request: HttpRequest, task_id: uuid.UUID) -> HttpResponse:
    found = owned_or_404(request, task_id)
    return task_page(request, found, reused=request.GET.get("reused") == "1")


@login_required
@require_POST
def retry(request: HttpRequest, task_id: uuid.UUID) -> HttpResponse:
    """Start a new report of an ended task's documents, and go to it.

    Both "Try again" on a task that ended without a report (its instructions editable)
    and "Write a fresh one" on a report offered again come here.
    """
    found = owned_or_404(request, task_id)
    key = request.POST.get("idempotency_key") or None
    raw = request.POST.get("instructions")
    try:
        if key is not None and not submission_form.IDEMPOTENCY_KEY.fullmatch(key):
            raise ApiError(400, "invalid_request", "The form is out of date; reload the page.")
        instructions = None if raw is None else submission_form.read_instructions(raw)
        submission = submissions.resubmission(found, key, instructions)
        task, _ = submissions.submit(request.user, submission)
    except ApiError as exc:
        return task_page(request, found, reused=raw is None, error=exc)
    return redirect("task", task_id=task.pk)


@login_required
@require_GET
def source(request: HttpRequest, task_id: uuid.UUID, passage_id: str) -> HttpResponse:
    """Show one passage of the user's task, with the passages before and after it."""
    found = owned_or_404(request, task_id)
    passage = presentation.source_passage(found, passage_id)
    if passage is None:
        raise Http404("No such task.")
    previous, following = presentation.passage_neighbours(found, passage)
    context = {
        "task": found,
        "title": presentation.task_title(found),
        "passage": passage,
        "blocks": presentation.passage_blocks(passage.text),
        "previous": previous,
        "next": following,
    }
    return render(request, "reports/source.html", context)


def task_page(request, task: Task, *, reused: bool = False, error: ApiError | None = None, **extra):
    context = presentation.page_context(task)
    if context["succeeded"]:
        context["share_links"] = list(task.share_links.live())
    # A fresh key per render: a double click on Try again makes one task.
    context.update(
        retry_key=str(uuid.uuid4()),
        retry_error=error,
        max_instructions=settings.REPORTS_MAX_INSTRUCTIONS_CHARS,
        # The page counts a silent socket as dead by the server's own heartbeat.
        heartbeat_ms=round(HEARTBEAT_S * 1000),
    )
    context.update(extra)
    if reused and context["succeeded"]:
        # Offered again for a new upload of the same documents: say so, and offer a new one.
        context["reused"] = True
    # The page holds the text so far and the seq it covers: no cache may keep a stale copy
    # (reports.serving.middleware marks every page `no-store`).
    return render(
        request, "reports/task.html", context, status=error.status if error is not None else 200
    )
