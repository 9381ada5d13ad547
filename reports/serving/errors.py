"""The one JSON error answer of docs/api.md: {"error": {"code", "message"}}, never cached."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from django.utils.cache import patch_cache_control
from django.views.defaults import page_not_found


def json_error(status: int, code: str, message: str, headers: dict | None = None) -> JsonResponse:
    """Return the error answer; no cache keeps it, as it may name one user's data."""
    response = JsonResponse({"error": {"code": code, "message": message}}, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    patch_cache_control(response, no_store=True, private=True)
    return response


def asgi_headers(response) -> list[tuple[bytes, bytes]]:
    """Return a response's headers as an ASGI `http.response.start` carries them."""
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]


def not_found(request, exception=None) -> HttpResponse:
    """The 404 of a path nothing serves (`handler404`): under /api/ the API's own JSON
    error, as a script reads every other answer there; elsewhere the product's page."""
    if request.path.startswith("/api/"):
        return json_error(404, "not_found", "Nothing is served at this address of the API.")
    return page_not_found(request, exception)
