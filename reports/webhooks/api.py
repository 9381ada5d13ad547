"""The webhook routes of docs/api.md: register, list and remove the caller's endpoints."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import RawPostDataException

from reports.auth import ApiError, api_view
from reports.webhooks import endpoints

MAX_BODY_BYTES = 8192  # a URL of 2,000 characters, JSON-escaped, with room to spare


@api_view({"GET", "POST"})
def webhooks(request: HttpRequest, user) -> JsonResponse:
    if request.method == "GET":
        return JsonResponse({"webhooks": endpoints.listing(user)})
    if int(request.META.get("CONTENT_LENGTH") or 0) > MAX_BODY_BYTES:  # a number (reports.auth)
        raise ApiError(400, "invalid_request", f"The body is over {MAX_BODY_BYTES:,} bytes.")
    try:
        url = json.loads(request.body)["url"]
    except (ValueError, TypeError, KeyError, RawPostDataException):
        raise ApiError(400, "invalid_request", 'Send {"url": "https://…"} as JSON.') from None
    try:
        endpoint = endpoints.register(user, url)
    except endpoints.Invalid as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    return JsonResponse(
        {"id": str(endpoint.pk), "url": endpoint.url, "secret": endpoint.secret}, status=201
    )


@api_view({"DELETE"})
def webhook(request: HttpRequest, user, webhook_id: str) -> HttpResponse:
    if not endpoints.remove(user, webhook_id):
        raise ApiError(404, "not_found", "No such webhook.")
    return HttpResponse(status=204)
