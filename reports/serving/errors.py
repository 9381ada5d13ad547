"""The error answers: the API's one JSON error of docs/api.md, {"error": {"code",
"message"}}, never cached; and the answers of a request nothing else answered (`handler404`,
`handler500`, `CSRF_FAILURE_VIEW`)."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils.cache import patch_cache_control
from django.views.defaults import page_not_found, server_error


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


def in_api(path: str) -> bool:
    """Whether `path` is the API's: /api and what is under it, where a script reads JSON."""
    return path == "/api" or path.startswith("/api/")


def not_found(request, exception=None) -> HttpResponse:
    """The 404 of a path nothing serves (`handler404`): under /api/ the API's own JSON
    error, as a script reads every other answer there; elsewhere the product's page."""
    if in_api(request.path):
        return json_error(404, "not_found", "Nothing is served at this address of the API.")
    return page_not_found(request, exception)


def internal_error(request) -> HttpResponse:
    """The 500 of an error no view answered (`handler500`): under /api/ the API's own JSON
    error, as `reports.auth` answers its views' (the event stream is not one of them);
    elsewhere the product's page. Django has logged its traceback."""
    if in_api(request.path):
        return json_error(
            500, "internal_error", "Something went wrong on our side; try again later."
        )
    return server_error(request)


# A form refused by its CSRF check was almost always left open while its session changed:
# the user signed in again in another tab (which makes a new token) or was signed out.
# Django's own page says only "CSRF verification failed"; this is the product's 403 page,
# saying what happened and what to do. The JSON API answers its own 403 `csrf_failed`
# (`reports.auth`).
STALE_FORM = (
    "This form was out of date, so nothing was done: you signed in again in another tab, "
    "or your session ended. Go back, reload the page and try again."
)


def csrf_failure(request, reason: str = "") -> HttpResponse:
    """The answer to a form refused by its CSRF check (`CSRF_FAILURE_VIEW`)."""
    return render(request, "403.html", {"lead": STALE_FORM}, status=403)
