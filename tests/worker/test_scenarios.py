"""Each simulated scenario of docs/providers.md, through the whole chain: API → worker → API."""

import pytest

from reports.models import Attempt, TaskEvent
from tests.helpers import run_all, submit, task_of

pytestmark = pytest.mark.django_db

FAILURES = [
    # scenario, error_type, partial text kept
    ("error", "provider_error", True),
    ("truncated", "stream_truncated", True),
    ("empty", "empty_output", False),
    ("stall", "stalled", False),
    ("invalid", "validation_failed", True),
]


def body(client, task):
    return client.get(f"/api/tasks/{task.pk}").json()


@pytest.mark.parametrize("scenario", ["ok", "slow"])
def test_scenario_succeeds_with_a_saved_valid_report(alice_client, worker, scenario):
    task = task_of(submit(alice_client, scenario=scenario))
    run_all(worker)
    found = body(alice_client, task)
    assert found["status"] == "succeeded"
    download = alice_client.get(found["result"]["download_url"])
    report = download.content.decode()
    assert report.startswith("# ")
    assert "## Summary" in report
    # The report as it streamed, its citations checked and its sources listed after it.
    streamed = Attempt.objects.get(task=task).text
    assert len(streamed) == found["text_length"]
    assert report.startswith(streamed.rstrip())
    assert report.endswith("\n") and "\n## Sources\n\n- S1 — " in report
    assert found["result"]["bytes"] == len(report.encode())
    assert found["error"] is None and found["partial"] is False
    timings = found["timings"]
    assert timings["queue_ms"] <= timings["first_text_ms"] <= timings["duration_ms"]


@pytest.mark.parametrize(("scenario", "error_type", "partial"), FAILURES)
def test_failure_scenario_ends_failed_keeping_partial_text(
    alice_client, worker, scenario, error_type, partial
):
    task = task_of(submit(alice_client, scenario=scenario))
    run_all(worker)
    found = body(alice_client, task)
    assert found["status"] == "failed"
    assert found["error"]["type"] == error_type
    assert found["error"]["message"]
    assert found["partial"] is partial
    assert (found["text_length"] > 0) is partial
    assert found["result"] is None
    assert alice_client.get(f"/api/tasks/{task.pk}/result").status_code == 404
    attempt = Attempt.objects.get(task=task)
    assert attempt.text == TaskEvent.objects.attempt_text(task.pk, 1)
    assert len(found["attempts"]) == 1


def test_rate_limited_waits_as_asked_then_succeeds_on_attempt_two(alice_client, worker):
    task = task_of(submit(alice_client, scenario="rate_limited"))
    run_all(worker)
    task.refresh_from_db()
    assert task.status == "queued"
    first = Attempt.objects.get(task=task, number=1)
    assert (first.status, first.retry_after_s, first.error_type) == (
        "retry_scheduled",
        2,
        "rate_limited",
    )
    assert 1.5 <= (task.not_before - first.ended_at).total_seconds() <= 2.5
    assert body(alice_client, task)["status"] == "queued"
    task.__class__.objects.filter(pk=task.pk).update(not_before=first.ended_at)  # 2 s later
    run_all(worker)
    found = body(alice_client, task)
    assert found["status"] == "succeeded"
    assert [a["number"] for a in found["attempts"]] == [1, 2]
    assert found["usage"]["usage_source"] == "estimate"
