"""What every HTTP request and answer passes through, pages and API alike: a NUL in the
address is refused before any view reads it, and no cache keeps an answer."""

from __future__ import annotations

from django.core.exceptions import BadRequest
from django.utils.cache import patch_cache_control
from django.utils.deprecation import MiddlewareMixin

from reports.serving.errors import json_error

NUL = "\x00"
NUL_REFUSED = "The request holds a NUL character, which no name, filter or search may contain."


def holds_nul(request) -> bool:
    """Whether the path or the query string (a key or a value) holds a NUL character."""
    if NUL in request.path:
        return True
    return any(NUL in key or any(NUL in v for v in values) for key, values in request.GET.lists())


class RefuseNulMiddleware(MiddlewareMixin):
    """Refuse a NUL in the path or the query string: 400, as JSON for the API.

    PostgreSQL refuses a NUL in any text, so a filter or search holding one would fail in
    the database as a 500. Form bodies are checked by the forms (Django refuses a NUL in
    any text field); the bodies of uploads are read by the API under its own limits.
    """

    def process_request(self, request):
        if not holds_nul(request):
            return None
        if request.path.startswith("/api/"):
            return json_error(400, "invalid_request", NUL_REFUSED)
        raise BadRequest(NUL_REFUSED)


class NoStoreMiddleware(MiddlewareMixin):
    """Mark every answer `Cache-Control: no-store, private` unless it says it is public.

    Pages show one user's file names, budget and reports, or staff figures: neither the
    browser's cache nor a shared one may keep them. A view that sets its own directives
    keeps them, with these added.
    """

    def process_response(self, request, response):
        if "public" not in response.get("Cache-Control", ""):
            patch_cache_control(response, no_store=True, private=True)
        return response
