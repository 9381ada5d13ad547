"""OpenTelemetry behind `reports.observability.tracing`; imported only when `REPORTS_OTEL` is on.

The tracer provider is the process's own when the host installed one (for example
`opentelemetry-instrument`); otherwise one exporting over OTLP/HTTP, configured by the
standard `OTEL_EXPORTER_OTLP_*` environment variables.
"""

from __future__ import annotations

import contextlib
from datetime import datetime

from django.core.exceptions import ImproperlyConfigured
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from reports.observability.version import app_version

_provider: trace.TracerProvider | None = None


def use_provider(provider: trace.TracerProvider | None) -> None:
    """Send spans to `provider` (None: back to the default)."""
    global _provider
    _provider = provider


def tracer() -> trace.Tracer:
    global _provider
    if _provider is None:
        _provider = _default_provider()
    return _provider.get_tracer("reportline", app_version())


def _default_provider() -> trace.TracerProvider:
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider):
        return current
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise ImproperlyConfigured(
            "REPORTS_OTEL is on and no tracer provider was installed, so spans would go over "
            "OTLP/HTTP, but its exporter is missing: install the 'otel' extra."
        ) from exc
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(
        resource=Resource.create({"service.name": "reportline", "service.version": app_version()})
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


def context_from(traceparent: str):
    """Return the context a W3C `traceparent` names (None for none: a new trace)."""
    if not traceparent:
        return None
    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def trace_id_of(span) -> str:
    return f"{span.get_span_context().trace_id:032x}"


def current_span():
    return trace.get_current_span()


def current_traceparent() -> str:
    """Return the current span's W3C traceparent, or "" outside any span."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return ""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


@contextlib.contextmanager
def attempt_span(claim):
    parent = context_from(claim.traceparent)
    ids = {
        "reportline.task_id": str(claim.task_id),
        "reportline.attempt_id": str(claim.attempt_id),
        "reportline.attempt": claim.number,
        "reportline.lane": claim.lane,
    }
    wait = tracer().start_span(
        "queue wait", context=parent, start_time=nanoseconds(claim.queued_since), attributes=ids
    )
    wait.end(end_time=nanoseconds(claim.started_at))
    with tracer().start_as_current_span(
        "attempt", context=parent, start_time=nanoseconds(claim.started_at), attributes=ids
    ):
        yield


def nanoseconds(instant: datetime) -> int:
    return int(instant.timestamp() * 1e9)
