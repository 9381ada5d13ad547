"""What every HTTP request and answer passes through, pages and API alike: a NUL in its
text is refused before any view reads it, and no cache keeps an answer."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import BadRequest
from django.utils.cache import patch_cache_control
from django.utils.deprecation import MiddlewareMixin

from reports.serving.errors import json_error

NUL = "\x00"
NUL_REFUSED = "The request holds a NUL character, which no name, filter or search may contain."


def _texts(query) -> list[str]:
    return [text for key, values in query.lists() for text in (key, *values)]


def holds_nul(request) -> bool:
    """Whether text of the request that may reach the database holds a NUL character: the
    path, the query string, the session cookie, and the form fields of a page's POST."""
    texts = [request.path, request.COOKIES.get(settings.SESSION_COOKIE_NAME, "")]
    texts += _texts(request.GET)
    if request.method == "POST" and not request.path.startswith("/api/"):
        texts += _texts(request.POST)
    return any(NUL in text for text in texts)


class RefuseNulMiddleware(MiddlewareMixin):
    """Refuse a NUL in request text before any view reads it: 400, as JSON for the API.

    PostgreSQL refuses a NUL in any text, so a login name, a filter, a search, a selected
    id or a session key holding one would fail in the database as a 5xx. The API reads
    its own bodies, under its upload limits (`reports.upload_limits`), and keeps no NUL
    from them; every page's form body is checked here.
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
