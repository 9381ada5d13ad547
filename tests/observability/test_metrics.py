"""/metrics: the exposition, derived from the database, and who may read it."""

from __future__ import annotations

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reports.models import ApiToken, Attempt, CircuitState, ProviderCircuit, Task
from tests.timings import RETRIED, ended_task

pytestmark = pytest.mark.django_db
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-")


def scrape(client, **headers) -> dict:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    families = text_string_to_metric_families(response.content.decode())
    return {family.name: family for family in families}


def value(family, suffix: str = "", **labels) -> float:
    found = [
        s.value
        for s in family.samples
        if s.name == family.name + suffix and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (suffix, labels, family.samples)
    return found[0]


@pytest.fixture
def history(alice):
    """Three ended tasks with known times, a retried one, a cancel, and one queued."""
    ended_task(alice, queue_s=0.2, first_text_s=0.5, total_s=2.0)
    ended_task(alice, queue_s=3.0, first_text_s=4.0, total_s=40.0, lane="long")
    ended_task(
        alice,
        status="failed",
        error_type="timeout",
        queue_s=0.04,
        first_text_s=None,
        total_s=900.0,
    )
    ended_task(alice, queue_s=0.1, first_text_s=2.7, total_s=3.2, attempts=RETRIED)
    ended_task(alice, status="cancelled", queue_s=None, first_text_s=None, total_s=1.0)
    ended_task(alice, status="queued", queue_s=None, first_text_s=None, total_s=None)


def test_exposition_has_histograms_counters_and_gauges(admin_client, history):
    metrics = scrape(admin_client)

    queue = metrics["reportline_task_queue_seconds"]
    assert queue.type == "histogram"
    ok = {"lane": "short", "outcome": "succeeded"}
    assert value(queue, "_count", **ok) == 2  # 0.2 s and 0.1 s
    assert value(queue, "_bucket", le="0.1", **ok) == 1
    assert value(queue, "_bucket", le="0.25", **ok) == 2
    assert value(queue, "_sum", **ok) == pytest.approx(0.3)
    assert value(queue, "_count", lane="long", outcome="succeeded") == 1

    duration = metrics["reportline_task_duration_seconds"]
    # The timed-out task is counted, at its time to the timeout.
    timed_out = {"lane": "short", "outcome": "failed"}
    assert value(duration, "_count", **timed_out) == 1
    assert value(duration, "_bucket", le="600", **timed_out) == 0
    assert value(duration, "_bucket", le="1800", **timed_out) == 1
    assert value(duration, "_count", lane="short", outcome="cancelled") == 1
    first_text = metrics["reportline_task_first_text_seconds"]
    assert value(first_text, "_bucket", le="0.5", **ok) == 1

    stages = metrics["reportline_stage_seconds"]
    generate_ok = {"stage": "generate", "lane": "short", "outcome": "succeeded"}
    assert value(stages, "_count", **generate_ok) == 2  # 1.998 s and 0.8 s
    assert value(stages, "_bucket", le="1", **generate_ok) == 1
    assert value(stages, "_bucket", le="2.5", **generate_ok) == 2
    retried = {"stage": "generate", "lane": "short", "outcome": "retry_scheduled"}
    assert value(stages, "_sum", **retried) == pytest.approx(0.15)
    assert value(stages, "_count", stage="save", lane="short", outcome="succeeded") == 1

    ended = metrics["reportline_tasks_ended"]
    assert ended.type == "counter"
    assert value(ended, "_total", lane="short", outcome="failed", error_type="timeout") == 1
    assert value(ended, "_total", lane="short", outcome="succeeded", error_type="") == 2
    assert value(metrics["reportline_retries"], "_total", lane="short") == 1
    assert value(metrics["reportline_cancels"], "_total", lane="short") == 1
    assert value(metrics["reportline_timeouts"], "_total", lane="short") == 1
    assert value(metrics["reportline_timeouts"], "_total", lane="long") == 0
    assert value(metrics["reportline_queue_depth"], lane="short") == 1
    assert value(metrics["reportline_live_leases"], lane="short") == 0

    # Ids never become labels.
    for family in metrics.values():
        for sample in family.samples:
            assert not any(UUID.match(v) for v in sample.labels.values()), sample


def test_live_leases_and_queue_depth_follow_the_table(admin_client, make_task):
    from reports.worker.leases import claim_next_task

    make_task()
    make_task()
    claim_next_task("w1")
    metrics = scrape(admin_client)
    assert value(metrics["reportline_live_leases"], lane="short") == 1
    assert value(metrics["reportline_queue_depth"], lane="short") == 1
    assert Task.objects.count() == 2 and Attempt.objects.count() == 1


def test_the_providers_circuit_is_exported(admin_client, settings):
    metrics = scrape(admin_client)  # never failed: closed, nothing counted
    state = metrics["reportline_provider_circuit_state"]
    assert value(state, provider="simulated", state="closed") == 1
    assert value(state, provider="simulated", state="open") == 0
    ProviderCircuit.objects.create(
        provider="simulated", state=CircuitState.OPEN, failures=5, trips=2, opened_total=3
    )
    metrics = scrape(admin_client)
    state = metrics["reportline_provider_circuit_state"]
    assert value(state, provider="simulated", state="open") == 1
    assert value(state, provider="simulated", state="closed") == 0
    failures = metrics["reportline_provider_consecutive_failures"]
    assert value(failures, provider="simulated") == 5
    opened = metrics["reportline_provider_circuit_opened"]
    assert value(opened, "_total", provider="simulated") == 3


def test_anonymous_callers_are_refused(client):
    response = client.get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
    assert response.json()["error"]["code"] == "unauthenticated"
    bad = client.get("/metrics", headers={"Authorization": "Bearer rl_not-a-token"})
    assert bad.status_code == 401


def test_users_who_are_not_staff_are_refused(alice_client, alice_token, client):
    assert alice_client.get("/metrics").status_code == 403
    by_token = client.get("/metrics", headers={"Authorization": f"Bearer {alice_token}"})
    assert by_token.status_code == 403
    assert by_token.json()["error"]["code"] == "forbidden"


def test_staff_by_session_or_token_and_the_metrics_token_may_scrape(
    admin_client, admin_user, client, settings
):
    scrape(admin_client)
    staff_token = ApiToken.objects.issue(admin_user)
    scrape(client, Authorization=f"Bearer {staff_token}")
    settings.REPORTS_METRICS_TOKEN = "scrape-secret-123456"
    scrape(client, Authorization="Bearer scrape-secret-123456")
    assert (
        client.get("/metrics", headers={"Authorization": "Bearer scrape-secret-12"}).status_code
        == 401
    )
