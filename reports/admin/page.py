"""Django admin: the user's view of a task, for staff, read-only.

The task page itself (`/tasks/<id>/`) answers only its owner; staff see the same page here,
as a snapshot, with nothing on it that acts: no cancel, retry, download or live socket.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse

from reports import presentation
from reports.models import Task


def staff_page(model_admin, request, task_id) -> TemplateResponse:
    """Render the task page as its owner sees it now, for staff who may view tasks."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    task = get_object_or_404(Task.objects.select_related("owner"), pk=task_id)
    context = {**presentation.page_context(task), "staff_view": True}
    return TemplateResponse(request, "reports/task.html", context)
