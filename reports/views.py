"""The pages: the upload form with the user's reports, and the live task page."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from reports import presentation
from reports.models import Task
from reports.providers import SCENARIOS


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    rows = presentation.home_rows(request.user)
    context = {"rows": rows, "polling": presentation.any_active(rows)}
    if request.htmx:
        # The list polls itself while a report is on its way.
        response = render(request, "reports/home.html#task-list", context)
    else:
        context.update(
            # A fresh key per render: a double click or a resubmitted form makes one task.
            idempotency_key=str(uuid.uuid4()),
            scenarios=SCENARIOS if settings.REPORTS_ALLOW_SCENARIOS else (),
            max_files=settings.REPORTS_MAX_FILES,
            max_file_mb=f"{settings.REPORTS_MAX_FILE_MB:g}",
            max_instructions=settings.REPORTS_MAX_INSTRUCTIONS_CHARS,
        )
        response = render(request, "reports/home.html", context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@login_required
@require_GET
def task(request: HttpRequest, task_id: uuid.UUID) -> HttpResponse:
    found = Task.objects.owned(request.user, task_id)
    if found is None:
        raise Http404("No such task.")
    response = render(request, "reports/task.html", presentation.page_context(found))
    # The page holds the text so far and the seq it covers: never show a stale copy.
    response["Cache-Control"] = "no-store"
    return response
