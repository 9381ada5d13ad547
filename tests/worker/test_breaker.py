"""The provider's circuit breaker (docs/providers.md, "When the provider is down"): several
workers against a real HTTP fake of an OpenAI server that goes down and comes back, the
cooldown on an injected clock."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import Client
from django.utils.timezone import localtime

from reports import lifecycle
from reports.clock import FakeClock
from reports.models import CircuitState, ProviderCircuit, Task
from reports.models.breaker import cooldown_s
from reports.providers.base import ProviderError, Retry
from reports.worker.leases import claim_next_task
from reports.worker.retries import provider_down
from reports.worker.supervisor import Supervisor
from tests.helpers import ScriptedProvider, claim_concurrently, wait_for, whole_report
from tests.providers.openai_server import (
    KEY,
    REPORT_PIECES,
    OpenAIServer,
    Reply,
    error,
)

pytestmark = pytest.mark.django_db(transaction=True)

TASKS = 6
WORKERS, SLOTS = 3, 2


def go_down(server: OpenAIServer) -> None:
    """Every request fails for the provider's own reasons, as an outage does."""
    server.queue(*(error(500 if n % 2 else 503, "The server is down.") for n in range(200)))


def come_back(server: OpenAIServer) -> None:
    server.replies.clear()


def run_round(workers: list[Supervisor]) -> int:
    """Let every worker claim what it may, then wait for those attempts; return the claims."""

    async def go() -> int:
        claimed = 0
        for worker in workers:
            while await worker.claim_and_start():
                claimed += 1
        for worker in workers:
            await worker.wait_for_attempts()
        return claimed

    return async_to_sync(go)()


def circuit() -> ProviderCircuit:
    return ProviderCircuit.objects.get(provider="openai")


def statuses(tasks) -> list[str]:
    return [Task.objects.get(pk=task.pk).status for task in tasks]


def circuit_lines(logged) -> list[str]:
    lines = (json.loads(line) for line in logged.getvalue().splitlines() if line.strip())
    return [line["event"] for line in lines if line["event"].startswith("circuit.")]


@pytest.mark.usefixtures("worker_thread")
def test_an_outage_costs_a_handful_of_calls_and_every_task_waits_then_succeeds(
    openai_server, make_task, alice_client, admin_client, logged
):
    clock = FakeClock()
    workers = [Supervisor(slots=SLOTS, clock=clock) for _ in range(WORKERS)]
    go_down(openai_server)
    tasks = [make_task() for _ in range(TASKS)]

    # The failures open the circuit; the calls already under way end, and then none starts.
    run_round(workers)
    while run_round(workers):
        pass
    down_calls = len(openai_server.requests)
    assert 5 <= down_calls <= 5 + WORKERS * SLOTS  # not tasks times attempts (18)
    assert circuit().state == CircuitState.OPEN
    assert statuses(tasks) == ["queued"] * TASKS
    assert run_round(workers) == 0
    assert len(openai_server.requests) == down_calls

    # The page, /readyz and /metrics say so.
    next_try = localtime(circuit().retry_at)
    assert circuit().retry_at == clock.wall() + timedelta(seconds=30)
    page = alice_client.get(f"/tasks/{tasks[-1].pk}/").content.decode()
    assert f"The provider is unavailable; next try at {next_try:%H:%M:%S}" in page
    ready = Client().get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["provider"]["name"] == "openai"
    assert ready.json()["provider"]["circuit"] == "open"
    metrics = admin_client.get("/metrics").content.decode()
    assert 'reportline_provider_circuit_state{provider="openai",state="open"} 1.0' in metrics
    assert 'reportline_provider_circuit_opened_total{provider="openai"} 1.0' in metrics
    assert 'data-circuit="open"' in admin_client.get("/staff/latency/").content.decode()

    # After the cooldown one call goes through, the probe; it fails: twice as long now.
    clock.advance(29.9)
    assert run_round(workers) == 0
    clock.advance(0.1)
    assert run_round(workers) == 1
    assert len(openai_server.requests) == down_calls + 1
    assert circuit().state == CircuitState.OPEN
    assert circuit().retry_at == clock.wall() + timedelta(seconds=60)
    assert statuses(tasks) == ["queued"] * TASKS
    clock.advance(59)
    assert run_round(workers) == 0

    # The provider is back: the next probe succeeds, the circuit closes, the queue drains.
    come_back(openai_server)
    clock.advance(1)
    assert run_round(workers) == 1
    assert circuit().state == CircuitState.CLOSED
    while run_round(workers):
        pass
    assert statuses(tasks) == ["succeeded"] * TASKS
    assert len(openai_server.requests) == down_calls + 2 + (TASKS - 1)
    assert circuit_lines(logged) == [
        "circuit.open",
        "circuit.probing",
        "circuit.open",
        "circuit.probing",
        "circuit.closed",
    ]
    assert Client().get("/readyz").json()["provider"]["circuit"] in ("closed", "open")


def test_worker_processes_share_one_circuit(openai_server, make_task, spawn_worker):
    """Real `reportworker` processes, so the cooldown runs on real time (one second)."""
    go_down(openai_server)
    tasks = [make_task() for _ in range(TASKS)]
    environment = {
        "REPORTS_PROVIDER": "openai",
        "OPENAI_BASE_URL": openai_server.base_url,
        "OPENAI_API_KEY": KEY,
        "REPORTS_MODEL": "test-model",
        "REPORTS_MODEL_PRICE": "1,4,0.5",
        "REPORTS_BREAKER_COOLDOWN_S": "1",
        # Three processes starting at once on a busy machine can take longer than the
        # fixture's 2 s lease to read their first document: a reap then would blame it.
        "REPORTS_LEASE_S": "10",
    }
    for _ in range(WORKERS):
        spawn_worker(slots=SLOTS, **environment)

    # Down until a probe has failed: the circuit opened twice.
    wait_for(
        lambda: ProviderCircuit.objects.filter(provider="openai", opened_total__gte=2).exists(),
        "a probe to fail",
    )
    down_calls = len(openai_server.requests)
    come_back(openai_server)
    wait_for(
        lambda: (
            Task.objects.filter(pk__in=[t.pk for t in tasks], status="succeeded").count() == TASKS
        ),
        "every task to succeed",
    )
    found = circuit()
    probes = found.opened_total  # each opening was followed by one probe, the last succeeded
    assert down_calls <= 5 + WORKERS * SLOTS + probes
    assert len(openai_server.requests) <= down_calls + 1 + TASKS
    assert found.state == CircuitState.CLOSED
    assert statuses(tasks) == ["succeeded"] * TASKS


@pytest.mark.usefixtures("worker_thread")
def test_a_task_whose_failure_opened_the_circuit_waits_whatever_attempts_it_used(
    openai_server, make_task, settings
):
    settings.REPORTS_MAX_ATTEMPTS = 1
    settings.REPORTS_BREAKER_FAILURES = 1
    clock = FakeClock()
    worker = Supervisor(slots=1, clock=clock)
    go_down(openai_server)
    task = make_task()

    run_round([worker])
    assert statuses([task]) == ["queued"]  # not failed: its one attempt is used
    clock.advance(30)
    run_round([worker])  # the probe fails too
    assert statuses([task]) == ["queued"]
    come_back(openai_server)
    clock.advance(60)
    run_round([worker])
    assert statuses([task]) == ["succeeded"]
    assert len(openai_server.requests) == 3


async def test_the_probe_closes_the_circuit_as_soon_as_the_provider_answers(
    openai_server, make_task, settings
):
    settings.REPORTS_BREAKER_FAILURES = 1
    # The probe's answer begins, then goes on for as long as a long report would.
    openai_server.queue(
        error(500, "Down."), Reply(text=REPORT_PIECES[:2], finish_reason=None, end="hang")
    )
    probe, other = [await sync_to_async(make_task)() for _ in range(2)]
    clock = FakeClock()
    worker = Supervisor(slots=2, clock=clock)
    assert await worker.claim_and_start()
    await worker.wait_for_attempts()
    assert await worker.claim_and_start() is False  # open: the other task waits too

    clock.advance(30)
    assert await worker.claim_and_start()  # the probe
    assert await asyncio.to_thread(openai_server.hanging.wait, 10)
    for _ in range(200):  # bounded: the probe's worker writes the close right after headers
        if (await ProviderCircuit.objects.aget(provider="openai")).is_closed:
            break
        await asyncio.sleep(0.05)
    assert await worker.claim_and_start()  # the other task goes while the probe still runs
    assert (await Task.objects.aget(pk=probe.pk)).status == "running"
    assert await sync_to_async(lambda: lifecycle.cancel_task(Task.objects.get(pk=probe.pk)))()
    await worker.wait_for_attempts()
    assert (await Task.objects.aget(pk=other.pk)).status == "succeeded"


@pytest.mark.usefixtures("worker_thread")
def test_a_task_whose_calls_alone_fail_while_others_are_answered_ends_by_the_retry_table(
    make_task, settings
):
    unlucky = make_task()
    others = [make_task() for _ in range(3)]

    async def script(request, clock):
        if request.task_id == str(unlucky.pk):
            raise ProviderError("provider_error", "500", retry=Retry.RETRYABLE, status_code=500)
        async for item in whole_report(request, clock):
            yield item

    clock = FakeClock()
    worker = Supervisor(slots=2, clock=clock, provider=ScriptedProvider(script, clock))
    while run_round([worker]):
        pass
    unlucky.refresh_from_db()
    assert (unlucky.status, unlucky.error_type, unlucky.attempt_count) == (
        "failed",
        "provider_error",
        settings.REPORTS_MAX_ATTEMPTS,
    )
    assert statuses(others) == ["succeeded"] * 3
    assert ProviderCircuit.objects.get(provider=settings.REPORTS_PROVIDER).is_closed


@pytest.mark.usefixtures("worker_thread")
def test_a_refusal_never_counts_and_shows_the_provider_is_up(openai_server, make_task, settings):
    settings.REPORTS_BREAKER_FAILURES = 2
    # Each task: a 500 (one failure in a row), then, retried, a 400 (the provider answered).
    openai_server.queue(*(error(status, "No.") for _ in range(4) for status in (500, 400)))
    tasks = [make_task() for _ in range(4)]
    worker = Supervisor(slots=1, clock=FakeClock())
    while run_round([worker]):
        pass
    assert statuses(tasks) == ["failed"] * 4
    assert len(openai_server.requests) == 8
    assert (circuit().state, circuit().failures) == (CircuitState.CLOSED, 0)


@pytest.mark.usefixtures("worker_thread")
def test_a_task_past_its_deadline_ends_timeout_while_the_circuit_is_open(
    openai_server, make_task, settings
):
    settings.REPORTS_BREAKER_FAILURES = 1
    clock = FakeClock()
    worker = Supervisor(slots=1, clock=clock)
    go_down(openai_server)
    first, waiting = make_task(), make_task()
    run_round([worker])
    assert circuit().state == CircuitState.OPEN
    calls = len(openai_server.requests)
    late = timedelta(seconds=settings.REPORTS_TASK_DEADLINE_S + 1)
    Task.objects.filter(pk=first.pk).update(created_at=first.created_at - late)

    run_round([worker])
    first.refresh_from_db()
    assert (first.status, first.error_type) == ("failed", "timeout")
    assert statuses([waiting]) == ["queued"]
    assert len(openai_server.requests) == calls  # no call made for it


def test_concurrent_claimers_take_one_probe(make_task, settings):
    settings.REPORTS_PROVIDER = "openai"
    clock = FakeClock()
    tasks = [make_task() for _ in range(8)]
    ProviderCircuit.objects.create(
        provider="openai", state=CircuitState.OPEN, failures=5, trips=1, retry_at=clock.wall()
    )
    claims = claim_concurrently(8, clock=clock)
    assert [c.task_id for c in claims] == [tasks[0].pk]  # one probe, the oldest task
    assert circuit().state == CircuitState.PROBING
    assert circuit().probe_task_id == tasks[0].pk

    # A probe whose attempt is gone (its worker lost, the task requeued) is taken again.
    Task.objects.filter(pk=tasks[0].pk).update(status="queued", lease_expires_at=None)
    again = claim_next_task("worker-x", clock=clock)
    assert again is not None and again.task_id == tasks[0].pk
    assert claim_next_task("worker-y", clock=clock) is None


@pytest.mark.parametrize(
    ("error", "text_arrived", "counts"),
    [
        (ProviderError("provider_error", "500", retry=Retry.RETRYABLE, status_code=500), 0, 1),
        (ProviderError("rate_limited", "503", retry=Retry.RETRYABLE, status_code=503), 0, 1),
        (ProviderError("provider_error", "refused", retry=Retry.RETRYABLE), 0, 1),
        (ProviderError("provider_error", "reset", retry=Retry.RETRYABLE), 1, 0),
        (ProviderError("rate_limited", "429", retry=Retry.RETRYABLE, status_code=429), 0, 0),
        (ProviderError("provider_rejected", "400", status_code=400), 0, 0),
        (ProviderError("provider_auth", "401", status_code=401), 0, 0),
        (ProviderError("", "no answer", retry=Retry.UNKNOWN), 0, 0),
        (ProviderError("stalled", "stalled"), 1, 0),
    ],
    ids=["500", "503", "refused", "reset-after-text", "429", "400", "401", "unknown", "stall"],
)
def test_what_counts_against_the_circuit(error, text_arrived, counts):
    assert provider_down(error, text_arrived=bool(text_arrived)) is bool(counts)


@pytest.mark.parametrize(
    ("trips", "seconds"), [(1, 30), (2, 60), (3, 120), (5, 480), (6, 600), (5000, 600)]
)
def test_the_cooldown_doubles_with_each_failed_probe_up_to_ten_minutes(trips, seconds):
    assert cooldown_s(trips) == seconds
