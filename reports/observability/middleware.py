"""Per request: bind a request id and trace id for the logs, echo them, name the version."""

from __future__ import annotations

import logging
import re
import time
import uuid

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.db import OperationalError

from reports.observability import logs, tracing
from reports.observability.version import app_version
from reports.serving.errors import json_error

log = logging.getLogger("reports.http")

# A caller's own id is kept when it is short and plain (a proxy's, a client's); anything
# else is replaced, so no header can smuggle odd characters into the logs.
SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{8,128}")
# How long a client should wait before retrying when the database could not be reached.
DATABASE_RETRY_AFTER_S = 5


def request_id_of(request) -> str:
    incoming = request.headers.get("X-Request-ID", "")
    return incoming if SANE_REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex


class RequestContextMiddleware:
    """Set `request.request_id` (a sane `X-Request-ID`, else a new one) and the trace id
    (the `traceparent` header's, else a new one), bind both for every log line of the
    request, log one `http.request` line, and add `X-Request-ID` and `X-App-Version` to
    the response."""

    sync_capable = async_capable = True

    def __init__(self, get_response) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request):
        if iscoroutinefunction(self):
            return self._acall(request)
        started = self._begin(request)
        with logs.bound(request_id=request.request_id, trace_id=request.trace_id):
            response = self.get_response(request)
            return self._end(request, response, started)

    async def _acall(self, request):
        started = self._begin(request)
        with logs.bound(request_id=request.request_id, trace_id=request.trace_id):
            response = await self.get_response(request)
            return self._end(request, response, started)

    def process_exception(self, request, exception):
        """Answer a database that cannot be reached (no connection free in the pool, the
        server's slots all taken, the server down) with 503 JSON and Retry-After: a
        moment's overload is not a bug to show as a 500 page."""
        if not isinstance(exception, OperationalError):
            return None
        log.warning("database unavailable: %s", exception)
        return json_error(
            503,
            "database_unavailable",
            "The service is busy; retry in a few seconds.",
            {"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )

    def _begin(self, request) -> float:
        request.request_id = request_id_of(request)
        traceparent = request.headers.get("traceparent", "")
        request.trace_id = tracing.incoming_trace_id(traceparent) or tracing.new_trace_id()
        return time.monotonic()

    def _end(self, request, response, started: float):
        response["X-Request-ID"] = request.request_id
        response["X-App-Version"] = app_version()
        logs.log_event(
            log,
            "http.request",
            trace_id=request.trace_id,  # the admission span's, when one was started
            method=request.method,
            route=getattr(request.resolver_match, "route", ""),
            status=response.status_code,
            duration_ms=round((time.monotonic() - started) * 1000, 1),
        )
        return response
