"""OpenTelemetry tracing: one trace per task from the web request into the worker."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reports.observability import otel
from tests.helpers import run_all, submit, task_of

pytestmark = pytest.mark.django_db
ROOT_DIR = Path(__file__).resolve().parents[2]
INCOMING = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def spans(settings):
    settings.REPORTS_OTEL = True
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.use_provider(provider)
    yield exporter
    otel.use_provider(None)


def by_name(exporter) -> dict:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_one_trace_per_task_from_request_to_save(alice_client, worker, spans):
    task = task_of(submit(alice_client, headers={"traceparent": INCOMING}))
    run_all(worker)
    found = by_name(spans)
    assert set(found) >= {
        "admission",
        "queue wait",
        "attempt",
        "parse",
        "prepare",
        "provider call",
        "validate",
        "render",
        "save",
    }
    trace_ids = {span.context.trace_id for span in spans.get_finished_spans()}
    assert trace_ids == {int("4bf92f3577b34da6a3ce929d0e0e4736", 16)}
    assert task.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"

    admission = found["admission"]
    assert admission.parent.span_id == int("00f067aa0ba902b7", 16)  # the caller's span
    # The worker's spans hang under the admission span, carried by the stored traceparent.
    assert found["attempt"].parent.span_id == admission.context.span_id
    assert found["queue wait"].parent.span_id == admission.context.span_id
    for stage in ("parse", "prepare", "provider call", "validate", "render", "save"):
        assert found[stage].parent.span_id == found["attempt"].context.span_id
    assert found["queue wait"].end_time <= found["attempt"].start_time + 1_000_000
    first_text = [e for e in found["provider call"].events if e.name == "first text"]
    assert len(first_text) == 1 and first_text[0].attributes["first_text_ms"] > 0
    assert found["attempt"].attributes["reportline.status"] == "succeeded"
    assert found["attempt"].attributes["reportline.task_id"] == str(task.pk)


def test_a_request_without_traceparent_starts_a_new_trace(alice_client, worker, spans):
    task = task_of(submit(alice_client))
    run_all(worker)
    found = by_name(spans)
    assert found["admission"].parent is None
    assert f"{found['admission'].context.trace_id:032x}" == task.trace_id
    assert found["attempt"].context.trace_id == found["admission"].context.trace_id


def test_a_task_created_outside_a_request_still_has_one_trace(make_task, worker, spans):
    task = make_task()
    assert len(task.trace_id) == 32 and task.trace_id != "0" * 32
    run_all(worker)
    traced = {s.context.trace_id for s in spans.get_finished_spans()}
    assert traced == {int(task.trace_id, 16)}
    assert by_name(spans)["attempt"].parent.span_id == int(task.traceparent.split("-")[2], 16)


def test_a_retry_is_a_second_attempt_in_the_same_trace(alice_client, scripted_worker, spans):
    from reports.providers.base import ProviderError, Retry
    from tests.helpers import whole_report

    calls = []

    async def flaky(request, clock):
        calls.append(1)
        if len(calls) == 1:
            raise ProviderError("rate_limited", "slow down", retry=Retry.RETRYABLE)
        async for item in whole_report(request, clock):
            yield item

    task = task_of(submit(alice_client))
    run_all(scripted_worker(flaky))
    attempts = [s for s in spans.get_finished_spans() if s.name == "attempt"]
    assert len(attempts) == 2
    assert {s.context.trace_id for s in attempts} == {int(task.trace_id, 16)}
    assert [s.attributes["reportline.status"] for s in attempts] == ["queued", "succeeded"]


def test_with_tracing_off_opentelemetry_is_never_imported():
    script = textwrap.dedent(
        """
        import os, sys, pkgutil, importlib
        os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
        import django
        django.setup()
        import reports
        for module in pkgutil.walk_packages(reports.__path__, "reports."):
            if module.name != "reports.observability.otel":
                importlib.import_module(module.name)
        import project.urls
        from reports.observability import tracing
        with tracing.stage("parse"):
            tracing.event("first text", first_text_ms=1.0)
            tracing.annotate(status="ok")
        fields = tracing.task_trace_fields()
        assert len(fields["trace_id"]) == 32, fields
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
        assert not loaded, loaded
        print("clean")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT_DIR, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("clean")
