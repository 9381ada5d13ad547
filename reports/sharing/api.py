"""The share routes of the JSON API (docs/api.md)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from reports.auth import api_view, json_object, owned_task, raise_if_upload_stopped
from reports.sharing import links

MAX_JSON_BYTES = 1024  # {"expires_in_days": 90}, with room to spare


@api_view({"POST", "DELETE"})
def share(request: HttpRequest, user, task_id) -> HttpResponse:
    task = owned_task(user, task_id)
    if request.method == "DELETE":
        links.revoke_links(task)
        return HttpResponse(status=204)
    if request.content_type == "application/json":
        raw = _days_in_json(request)
    else:
        raw = request.POST.get("expires_in_days")
        # A form the upload limits stopped lost what came after the cut: maybe the days.
        raise_if_upload_stopped(request)
    days = links.read_days(raw)
    new = links.create_link(task, days)
    url = request.build_absolute_uri(new.path)
    return JsonResponse({"share_url": url, "expires_at": new.expires_at.isoformat()}, status=201)


def _days_in_json(request: HttpRequest) -> str | None:
    """Return `expires_in_days` of a JSON body as the form would carry it (None when
    absent). Read, not ignored: a link made for the default 7 days when 1 was asked for
    would outlive what its owner meant."""
    body = json_object(request, MAX_JSON_BYTES, 'Send {"expires_in_days": 7} as JSON, or a form.')
    value = body.get("expires_in_days")
    if value is None:
        return None
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    return ""  # 7.5, true, a list: no whole number, refused as a form's would be
