"""The webhook routes of docs/api.md: register, list and remove the caller's endpoints, and
give one a new secret."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse

from reports.auth import ApiError, api_view, json_object
from reports.webhooks import endpoints, sealing

MAX_BODY_BYTES = 8192  # a URL of 2,000 characters, JSON-escaped, with room to spare


@api_view({"GET", "POST"})
def webhooks(request: HttpRequest, user) -> JsonResponse:
    if request.method == "GET":
        return JsonResponse({"webhooks": endpoints.listing(user)})
    usage = 'Send {"url": "https://…"} as JSON.'
    url = json_object(request, MAX_BODY_BYTES, usage).get("url")
    if url is None:
        raise ApiError(400, "invalid_request", usage)
    try:
        endpoint = endpoints.register(user, url)
    except endpoints.Invalid as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    return JsonResponse(shown_once(endpoint), status=201)


@api_view({"POST"})
def secret(request: HttpRequest, user, webhook_id: str) -> JsonResponse:
    endpoint = endpoints.new_secret_for(user, webhook_id)
    if endpoint is None:
        raise ApiError(404, "not_found", "No such webhook.")
    return JsonResponse(shown_once(endpoint))


def shown_once(endpoint) -> dict:
    """The answer that shows an endpoint's secret, the one time it is shown."""
    return {
        "id": str(endpoint.pk),
        "url": endpoint.url,
        "secret": sealing.unseal(endpoint.sealed_secret),
    }


@api_view({"DELETE"})
def webhook(request: HttpRequest, user, webhook_id: str) -> HttpResponse:
    if not endpoints.remove(user, webhook_id):
        raise ApiError(404, "not_found", "No such webhook.")
    return HttpResponse(status=204)
