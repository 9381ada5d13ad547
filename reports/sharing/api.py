"""The share routes of the JSON API (docs/api.md)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from reports.auth import api_view, owned_task
from reports.sharing import links


@api_view({"POST", "DELETE"})
def share(request: HttpRequest, user, task_id) -> HttpResponse:
    task = owned_task(user, task_id)
    if request.method == "DELETE":
        links.revoke_links(task)
        return HttpResponse(status=204)
    days = links.read_days(request.POST.get("expires_in_days"))
    new = links.create_link(task, days)
    url = request.build_absolute_uri(new.path)
    return JsonResponse({"share_url": url, "expires_at": new.expires_at.isoformat()}, status=201)
