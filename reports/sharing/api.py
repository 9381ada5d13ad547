"""The share routes of the JSON API (docs/api.md)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from reports.auth import api_view, owned_task, raise_if_upload_stopped
from reports.sharing import links


@api_view({"POST", "DELETE"})
def share(request: HttpRequest, user, task_id) -> HttpResponse:
    task = owned_task(user, task_id)
    if request.method == "DELETE":
        links.revoke_links(task)
        return HttpResponse(status=204)
    raw = request.POST.get("expires_in_days")
    # A form the upload limits stopped lost what came after the cut: maybe the days.
    raise_if_upload_stopped(request)
    days = links.read_days(raw)
    new = links.create_link(task, days)
    url = request.build_absolute_uri(new.path)
    return JsonResponse({"share_url": url, "expires_at": new.expires_at.isoformat()}, status=201)
