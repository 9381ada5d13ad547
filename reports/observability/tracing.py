"""Tracing of a task's chain: one trace per task, from the web request into the worker.

Off by default. With `REPORTS_OTEL` on (and the `otel` extra installed) spans go to
OpenTelemetry through `reports.observability.otel`; with it off this module imports nothing of
OpenTelemetry and every span below is a no-op. Either way each task stores a W3C
`traceparent` and a `trace_id`, so logs join across processes by the same id a trace
would use.

Spans: `admission` (the create request), then per attempt `queue wait`, `attempt`,
and one span per stage: `parse`, `prepare`, `provider call` (the generate stage, with
the first text as an event), `validate`, `render`, `save`.
"""

from __future__ import annotations

import contextlib
import re
import secrets

from django.conf import settings

from reports.observability import logs

TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
STAGE_SPANS = {"generate": "provider call"}  # a Stage; the others keep their names


def enabled() -> bool:
    return settings.REPORTS_OTEL


def _otel():
    from reports.observability import otel  # imports OpenTelemetry: only when tracing is on

    return otel


def incoming_trace_id(traceparent: str) -> str:
    """Return the trace id of a valid W3C `traceparent` header, or ""."""
    match = TRACEPARENT.fullmatch(traceparent.strip().lower())
    if match is None or set(match[1]) == {"0"} or set(match[2]) == {"0"}:
        return ""
    return match[1]


def new_trace_id() -> str:
    return secrets.token_hex(16)


@contextlib.contextmanager
def admission(request):
    """Span the creation of a task, as a child of the request's own `traceparent`."""
    if not enabled():
        yield
        return
    otel = _otel()
    with otel.tracer().start_as_current_span(
        "admission", context=otel.context_from(request.headers.get("traceparent", ""))
    ) as span:
        trace_id = otel.trace_id_of(span)
        request.trace_id = trace_id
        with logs.bound(trace_id=trace_id):
            yield


def task_trace_fields() -> dict[str, str]:
    """Return the request id, trace id and `traceparent` a new task stores.

    Inside the admission span, its own; otherwise (tracing off, or a task created
    outside a request) the bound trace id, or a new one, with a new span id.
    """
    traceparent = _otel().current_traceparent() if enabled() else ""
    if traceparent:
        trace_id = TRACEPARENT.fullmatch(traceparent)[1]
    else:
        trace_id = logs.current("trace_id") or new_trace_id()
        traceparent = f"00-{trace_id}-{secrets.token_hex(8)}-01"
    return {
        "request_id": logs.current("request_id"),
        "trace_id": trace_id,
        "traceparent": traceparent,
    }


@contextlib.contextmanager
def attempt(claim):
    """Span one attempt (after a `queue wait` span), in its task's trace."""
    if not enabled() or not claim.traceparent:
        yield
        return
    with _otel().attempt_span(claim):
        yield


@contextlib.contextmanager
def stage(name: str):
    """Span one stage of the current attempt."""
    if not enabled():
        yield
        return
    with _otel().tracer().start_as_current_span(STAGE_SPANS.get(name, name)):
        yield


def event(name: str, **attributes) -> None:
    """Mark a moment (e.g. the first text) on the current span."""
    if enabled():
        _otel().current_span().add_event(name, attributes)


def annotate(**attributes) -> None:
    """Set attributes (outcome, error type, token counts) on the current span."""
    if enabled():
        _otel().current_span().set_attributes(
            {k: v for k, v in attributes.items() if v is not None}
        )
