"""The provider's calls at once: a server with two slots is never sent more than two calls;
the other tasks wait in Reportline's own queue, where their page shows a place in line.
The limit comes from REPORTS_PROVIDER_CONCURRENCY, the server's slots, or what 429s and
waits inside the server taught (additive increase, multiplicative decrease)."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db.models import F
from prometheus_client.parser import text_string_to_metric_families

from reports import presentation
from reports.clock import Clock
from reports.models import ProviderFigures, Task
from reports.providers import concurrency
from reports.worker.leases import claim_next_task
from reports.worker.supervisor import Supervisor
from tests.helpers import make_submission, run_all, wait_for
from tests.providers.openai_server import KEY, Reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(openai_server):
    return openai_server


def claims(count: int) -> int:
    """Claim as many times as `count` workers would; return how many got a task."""
    return sum(claim_next_task(f"worker-{n}") is not None for n in range(count))


def test_claims_keep_to_the_configured_concurrency(settings, alice, server):
    settings.REPORTS_PROVIDER_CONCURRENCY = 2
    for _ in range(8):
        make_submission(alice)
    assert claims(8) == 2
    # A call ends (its task is finalizing): one more may start.
    Task.objects.filter(pk=Task.objects.filter(status="running").first().pk).update(
        status="finalizing"
    )
    assert claims(8) == 1


def test_the_servers_slots_bound_the_claims(settings, alice, server):
    concurrency.record_slots(3)
    for _ in range(8):
        make_submission(alice)
    assert claims(8) == 3
    assert concurrency.limit() == 3 and concurrency.in_flight() == 3


def test_the_lower_of_the_setting_and_the_slots_wins(settings):
    settings.REPORTS_PROVIDER_CONCURRENCY = 4
    concurrency.record_slots(2)
    assert concurrency.limit() == 2
    settings.REPORTS_PROVIDER_CONCURRENCY = 1
    assert concurrency.limit() == 1


def test_an_overload_halves_the_limit_and_calls_that_went_well_raise_it_again(settings):
    concurrency.record_slots(8)
    concurrency.after_call(overloaded=True, server_wait_s=None)
    assert concurrency.limit() == 4
    concurrency.after_call(overloaded=False, server_wait_s=12.0)  # queued inside the server
    assert concurrency.limit() == 2
    for _ in range(2):  # additive: 2 → 2.5 → 2.9
        concurrency.after_call(overloaded=False, server_wait_s=0.1)
    assert concurrency.limit() == 2
    concurrency.after_call(overloaded=False, server_wait_s=None)  # 2.9 → 3.24
    assert concurrency.limit() == 3
    for _ in range(100):  # never past what the server has
        concurrency.after_call(overloaded=False, server_wait_s=None)
    assert concurrency.limit() == 8
    for _ in range(10):  # and never under one
        concurrency.after_call(overloaded=True, server_wait_s=None)
    assert concurrency.limit() == 1


def test_with_no_limit_known_a_429_halves_what_was_running(settings, alice, server):
    for _ in range(6):
        make_submission(alice)
    assert claims(6) == 6  # nobody said how many: as many as the caps allow
    concurrency.after_call(overloaded=True, server_wait_s=None)
    assert concurrency.limit() == 3
    # Calls that go well, with nothing learned, change nothing.
    ProviderFigures.objects.all().delete()
    concurrency.after_call(overloaded=False, server_wait_s=0.0)
    assert concurrency.limit() is None


def test_the_limit_and_the_calls_in_flight_are_on_metrics(settings, admin_client, alice, server):
    concurrency.record_slots(2)
    for _ in range(3):
        make_submission(alice)
    claims(3)
    response = admin_client.get("/metrics")
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    (limit,) = families["reportline_provider_concurrency_limit"].samples
    (in_flight,) = families["reportline_provider_calls_in_flight"].samples
    assert (limit.value, in_flight.value) == (2, 2)


def test_eight_tasks_through_two_slots_queue_here_not_in_the_server(settings, alice, server):
    """Two workers of four slots each, eight tasks, a provider of two slots: two calls at
    the server, six tasks queued here with their places in line, and all eight done."""
    settings.REPORTS_PROVIDER_CONCURRENCY = 2
    release = threading.Event()
    server.queue(*(Reply(hold=release) for _ in range(8)))
    tasks = [make_submission(alice) for _ in range(8)]

    async def scenario() -> list[str]:
        workers = [Supervisor(slots=4, clock=Clock()) for _ in range(2)]
        try:
            for worker in workers:
                while await worker.claim_and_start():
                    pass
            assert await asyncio.to_thread(server.wait_for_open_calls, 2)
            lines = await sync_to_async(queued_lines)()
        finally:
            release.set()  # whatever happened, the held calls end
            for worker in workers:
                await worker.wait_for_attempts()
        for _ in range(8):  # each round: the calls under way end, the next ones start
            for worker in workers:
                while await worker.claim_and_start():
                    pass
            for worker in workers:
                await worker.wait_for_attempts()
        return lines

    def queued_lines() -> list[str]:
        queued = Task.objects.filter(status="queued").order_by("created_at")
        assert Task.objects.filter(status="running").count() == 2
        assert [task.queue_position() for task in queued] == [1, 2, 3, 4, 5, 6]
        return [
            presentation.status_context(task, presentation.task_state(task))["detail"]
            for task in queued
        ]

    lines = async_to_sync(scenario)()
    assert lines[0].startswith("next in line") and lines[5].startswith("6th in line")
    assert server.most_open_calls == 2
    assert len(server.requests) == 8
    statuses = {t.status for t in Task.objects.filter(pk__in=[t.pk for t in tasks])}
    assert statuses == {"succeeded"}


def test_the_wait_in_line_counts_the_providers_calls_at_once(settings, alice):
    settings.REPORTS_LANE_LIMITS = {"short": 6, "long": 2}
    settings.REPORTS_PROVIDER_CONCURRENCY = 2
    done = make_submission(alice)
    Task.objects.filter(pk=done.pk).update(
        status="succeeded",
        claimed_at=F("created_at"),
        finished_at=F("created_at") + timedelta(seconds=30),
    )
    # Two calls at a time (not the lane's six): 30 s / 2 a place.
    assert presentation.seconds_a_place("short") == pytest.approx(15)


def test_a_plans_calls_side_by_side_keep_to_the_limit(settings, alice, server):
    """A document several windows long: its parts' notes calls would run two at a time,
    but the provider takes one call at once."""
    settings.REPORTS_CONTEXT_TOKENS = 4_096
    settings.REPORTS_MAX_OUTPUT_TOKENS = 1_024
    settings.REPORTS_PLAN_PARALLEL_CALLS = 2
    settings.REPORTS_PROVIDER_CONCURRENCY = 1
    section = "The encoder of chapter {n} writes tag, length and value in that order. " * 40
    text = "# The manual\n\n" + "\n\n".join(
        f"## Chapter {n}\n\n" + section.format(n=n) for n in range(1, 30)
    )
    task = make_submission(alice, text)
    worker = Supervisor(slots=4, clock=Clock())
    asked = []  # the worker's idle slots each level of the plan asked to borrow
    borrow = worker.spare.borrow
    worker.spare.borrow = lambda wanted: asked.append(wanted) or borrow(wanted)
    run_all(worker)
    task.refresh_from_db()
    assert task.status == "succeeded", task.user_message
    assert task.plan["parts"] >= 2
    assert asked and set(asked) == {0}  # no second call beside the first
    assert server.most_open_calls == 1


def test_worker_processes_together_keep_to_the_limit(settings, alice, server, spawn_worker):
    """Three reportworker processes of four slots each, eight tasks, two calls at once."""
    release = threading.Event()
    server.queue(*(Reply(hold=release) for _ in range(8)))
    tasks = [make_submission(alice) for _ in range(8)]
    provider = {
        "REPORTS_PROVIDER": "openai",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": KEY,
        "REPORTS_MODEL": "test-model",
        "REPORTS_MODEL_PRICE": "1,4,0.5",
        "REPORTS_PROVIDER_CONCURRENCY": "2",
    }
    for _ in range(3):
        spawn_worker(slots=4, **provider)
    try:
        assert server.wait_for_open_calls(2, timeout=60)
        # The workers claimed before they called: a third claim would be running by now.
        assert Task.objects.filter(status="running").count() == 2
        assert Task.objects.filter(status="queued").count() == 6
    finally:
        release.set()
    ids = [task.pk for task in tasks]
    wait_for(
        lambda: Task.objects.filter(pk__in=ids, status="succeeded").count() == 8,
        "every task to succeed",
    )
    assert server.most_open_calls == 2 and len(server.requests) == 8
