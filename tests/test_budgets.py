"""Money: prices, the reservation at submit, and how every way a task ends settles it."""

import asyncio
import datetime as dt

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured

from reports import budgets, events, presentation
from reports.clock import Clock
from reports.models import Attempt, Budget, Document, Status, Task
from reports.providers.base import Completed, ProviderError, Retry, TextDelta, Usage
from reports.providers.prompts import PROMPT_VERSION, estimated_usage
from reports.providers.simulated import SimulatedProvider
from reports.reconciliation import resolve_reconciliation
from reports.worker.leases import claim_next_task, mark_sent, reap_expired_leases
from reports.worker.supervisor import Supervisor
from tests.helpers import (
    SAMPLE,
    expire_lease,
    run_all,
    stored_files,
    submit,
    task_of,
    upload,
    whole_report,
)
from tests.parsers import samples
from tests.providers.openai_server import OpenAIServer, Reply, point_at

pytestmark = pytest.mark.django_db

PRICE = {"input": 1_000_000, "output": 4_000_000, "cached_input": 500_000}  # $1, $4, $0.50 /M


@pytest.fixture(autouse=True)
def known_prices(settings):
    settings.REPORTS_MODEL = "extractive"
    settings.REPORTS_PRICES = {"extractive": PRICE}
    settings.REPORTS_MAX_OUTPUT_TOKENS = 1_000
    settings.REPORTS_DEFAULT_BUDGET_MICROS = 5_000_000


def budget(user) -> Budget:
    return Budget.objects.get(user=user)


def refreshed(task: Task) -> Task:
    task.refresh_from_db()
    return task


def assert_nothing_held(user) -> None:
    """The budget holds exactly what its tasks hold: no reservation leaked."""
    held = sum(Task.objects.filter(owner=user).values_list("reserved_micros", flat=True))
    assert budget(user).reserved_micros == held


# --- prices --------------------------------------------------------------------------------


def test_usage_is_priced_in_whole_micro_dollars_rounded_up():
    # 1,000 input of which 400 cached, 500 output: 600 x $1 + 400 x $0.50 + 500 x $4 per million.
    assert budgets.usage_cost("extractive", 1_000, 500, 400) == 600 + 200 + 2_000
    assert budgets.usage_cost("extractive", 1, 0, None) == 1  # $0.000001, not 0
    assert budgets.usage_cost("extractive", 3, 0, 5) == 2  # cached never exceeds input


def test_an_unknown_model_is_a_configuration_error(settings):
    with pytest.raises(ImproperlyConfigured, match="REPORTS_PRICES"):
        budgets.usage_cost("no-such-model", 1, 1, None)


def test_missing_usage_is_unknown_never_free():
    missing = Usage(None, None, None, "missing")
    assert budgets.attempt_cost("extractive", missing, billed_nothing=False) is None
    assert budgets.attempt_cost("extractive", missing, billed_nothing=True) == 0
    half = Usage(100, None, None, "provider")
    assert budgets.attempt_cost("extractive", half, billed_nothing=False) is None


def test_the_reservation_is_the_input_estimate_and_the_output_cap(make_task, alice):
    task = make_task()
    size = len(SAMPLE.encode())
    tokens = -(-size // budgets.BYTES_PER_TOKEN) + budgets.PROMPT_TOKENS
    expected = budgets.usage_cost("extractive", tokens, 1_000, None)
    assert (task.cost_status, task.reserved_micros) == ("reserved", expected)
    assert (task.model, task.prompt_version) == ("extractive", PROMPT_VERSION)
    assert budget(alice).reserved_micros == expected
    assert budget(alice).limit_micros == 5_000_000  # created on first use, at the default


def test_the_input_estimate_never_exceeds_what_the_context_lets_through(settings):
    settings.REPORTS_CONTEXT_TOKENS, settings.REPORTS_MAX_OUTPUT_TOKENS = 10_000, 4_000
    # 10 MB of upload would be millions of tokens; the prompt cuts input to 6,000.
    assert budgets.input_estimate_tokens(10 * 1024 * 1024, "") == 6_000
    assert budgets.input_estimate_tokens(2_000, "") == 1_000 + budgets.PROMPT_TOKENS


# --- every way a task ends ------------------------------------------------------------------


def test_success_settles_to_the_actual_usage(make_task, alice, scripted_worker):
    task = make_task()
    run_all(scripted_worker(whole_report))  # usage: 10 in, 20 out, from the provider
    task = refreshed(task)
    actual = budgets.usage_cost("extractive", 10, 20, None)
    assert (task.status, task.cost_status, task.cost_micros) == ("succeeded", "settled", actual)
    assert task.reserved_micros == 0
    assert (budget(alice).spent_micros, budget(alice).reserved_micros) == (actual, 0)


def test_a_report_by_the_simulated_model_costs_its_estimated_usage(make_task, alice, worker):
    task = make_task()
    run_all(worker)
    task = refreshed(task)
    attempt = Attempt.objects.get(task=task)
    assert attempt.usage_source == "estimate"
    assert task.cost_status == "settled"
    assert 0 < task.cost_micros == attempt.cost_micros == budget(alice).spent_micros


def test_a_request_refused_before_any_answer_releases_everything(make_task, alice, scripted_worker):
    async def refuse(request, clock):
        raise ProviderError("provider_auth", "401", status_code=401)
        yield  # pragma: no cover

    task = make_task()
    run_all(scripted_worker(refuse))
    task = refreshed(task)
    assert (task.status, task.cost_status, task.cost_micros) == ("failed", "released", 0)
    assert (budget(alice).spent_micros, budget(alice).reserved_micros) == (0, 0)


def test_a_retried_429_costs_nothing_and_one_reservation_covers_the_retry(
    make_task, alice, scripted_worker
):
    async def busy_then_fine(request, clock):
        if request.attempt_number == 1:
            raise ProviderError("rate_limited", "429", retry=Retry.RETRYABLE, retry_after_s=2)
        async for item in whole_report(request, clock):
            yield item

    task = make_task()
    worker = scripted_worker(busy_then_fine)
    run_all(worker)
    held = refreshed(task).reserved_micros  # topped up to the request the attempt sent
    assert refreshed(task).status == "queued"
    assert (refreshed(task).cost_status, budget(alice).reserved_micros) == ("reserved", held)
    Task.objects.filter(pk=task.pk).update(not_before=None)  # the 2 s are over
    run_all(worker)
    task = refreshed(task)
    first, second = Attempt.objects.filter(task=task).order_by("number")
    assert (first.status, first.cost_micros) == ("retry_scheduled", 0)
    assert task.status == "succeeded"
    assert task.cost_micros == second.cost_micros == budget(alice).spent_micros
    assert budget(alice).reserved_micros == 0


def test_a_stream_dropped_without_usage_settles_at_an_estimate(
    make_task, alice, alice_client, scripted_worker
):
    async def drop(request, clock):
        yield TextDelta("# Half a report")
        raise ProviderError("provider_error", "dropped", retry=Retry.RETRYABLE)

    task = make_task()
    run_all(scripted_worker(drop))
    body = alice_client.get(f"/api/tasks/{task.pk}").json()
    assert (body["status"], body["cost_status"]) == ("failed", "settled")
    usage = body["usage"]
    assert usage["usage_source"] == "estimate"
    assert usage["output_tokens"] == 5  # 15 characters, three a token
    assert usage["input_tokens"] > len(SAMPLE) // 3  # the prompt holds the document
    task = refreshed(task)
    expected = budgets.usage_cost("extractive", usage["input_tokens"], 5, None)
    assert task.cost_micros == expected == budget(alice).spent_micros
    assert budget(alice).reserved_micros == 0


def test_cancelling_a_queued_task_releases_its_reservation(make_task, alice, alice_client):
    task = make_task()
    assert alice_client.post(f"/api/tasks/{task.pk}/cancel").json()["cost_status"] == "released"
    assert (budget(alice).spent_micros, budget(alice).reserved_micros) == (0, 0)


def test_a_document_that_cannot_be_read_releases_everything(alice_client, alice, worker):
    task = task_of(submit(alice_client, upload("scan.pdf", samples.image_pdf())))
    run_all(worker)
    task = refreshed(task)
    assert (task.status, task.error_type, task.cost_status) == (
        "failed",
        "invalid_input",
        "released",
    )
    assert budget(alice).reserved_micros == 0


@pytest.mark.django_db(transaction=True)
async def test_a_cancel_while_streaming_without_usage_settles_at_an_estimate(
    make_task, alice, alice_client, scripted_worker
):
    task = await sync_to_async(make_task)()
    streaming = asyncio.Event()

    async def endless(request, clock):
        yield TextDelta("# Partial")
        await clock.sleep(1)  # past the flush interval
        yield TextDelta(" more")
        streaming.set()
        await asyncio.Event().wait()  # quiet, still connected, no usage yet

    worker = scripted_worker(endless)
    assert await worker.claim_and_start()
    await streaming.wait()
    cancel = await sync_to_async(alice_client.post)(f"/api/tasks/{task.pk}/cancel")
    assert cancel.status_code == 202
    await worker.wait_for_attempts()
    body = (await sync_to_async(alice_client.get)(f"/api/tasks/{task.pk}")).json()
    assert (body["status"], body["cost_status"]) == ("cancelled", "settled")
    assert body["usage"]["usage_source"] == "estimate"
    assert body["usage"]["output_tokens"] == 5  # "# Partial more": 14 characters
    task = await sync_to_async(refreshed)(task)
    assert 0 < task.cost_micros == (await sync_to_async(budget)(alice)).spent_micros
    await sync_to_async(assert_nothing_held)(alice)


def test_an_unknown_outcome_is_pending_until_an_admin_marks_it_failed(
    unanswered_task, alice, admin_user
):
    task = unanswered_task
    assert (task.status, task.cost_status) == ("reconciliation_required", "pending_reconciliation")
    assert budget(alice).reserved_micros == task.reserved_micros > 0

    # The admin checked: the provider never ran it. Nothing was spent.
    resolve_reconciliation(task.pk, Status.FAILED, by_user=admin_user)
    task = refreshed(task)
    assert (task.status, task.cost_status, task.cost_micros) == ("failed", "released", 0)
    assert (budget(alice).spent_micros, budget(alice).reserved_micros) == (0, 0)


def test_mark_settled_charges_what_the_admin_entered(unanswered_task, alice, admin_user):
    task = unanswered_task
    resolve_reconciliation(task.pk, Status.FAILED, by_user=admin_user, unknown_cost=777)
    task = refreshed(task)
    assert (task.status, task.cost_status, task.cost_micros) == ("failed", "settled", 777)
    assert (budget(alice).spent_micros, budget(alice).reserved_micros) == (777, 0)


def test_requeue_keeps_the_reservation_and_the_unknown_attempt_stays_open(
    make_task, alice, admin_user, scripted_worker, settings, clock
):
    settings.REPORTS_PROVIDER_RESPONSE_TIMEOUT_S = 60

    async def silent_then_fine(request, clock):
        if request.attempt_number == 1:
            await clock.sleep(61)
        async for item in whole_report(request, clock):
            yield item

    task = make_task()
    run_all(scripted_worker(silent_then_fine))
    held = refreshed(task).reserved_micros  # topped up to the request the attempt sent
    resolve_reconciliation(task.pk, Status.QUEUED, by_user=admin_user)
    assert refreshed(task).cost_status == "reserved"
    assert budget(alice).reserved_micros == held
    clock.advance(-61)  # the second run starts from the injected clock's origin again
    run_all(scripted_worker(silent_then_fine))
    task = refreshed(task)
    assert (task.status, task.cost_status) == ("succeeded", "pending_reconciliation")
    # Accepting the reservation as the cost charges it whole.
    unknown = budgets.unknown_cost_at_reservation(task.pk)
    budgets.settle_pending(task.pk, unknown)
    task = refreshed(task)
    assert (task.cost_status, task.cost_micros) == ("settled", held)
    assert (budget(alice).spent_micros, budget(alice).reserved_micros) == (held, 0)


def lose_worker(task: Task, *, prompt_chars: int | None, text: str = "") -> None:
    """Claim the task, send a prompt of `prompt_chars` (None: none sent), stream `text`,
    and lose the worker: its lease expires and the reaper takes the task."""
    claim = claim_next_task("dead-worker")
    if prompt_chars is not None:
        assert mark_sent(claim.task_id, claim.attempt_id, claim.epoch, prompt_chars)
    if text:
        Task.objects.append_event(claim.task_id, claim.epoch, events.delta(text))
    expire_lease(task)
    reap_expired_leases()


@pytest.fixture
def remote_provider(monkeypatch):
    """The provider runs outside the worker: a lost worker's call may have gone on."""
    monkeypatch.setattr(SimulatedProvider, "in_process", False)


def test_a_lost_worker_whose_call_got_no_byte_back_leaves_the_cost_unknown(
    make_task, alice, settings, remote_provider
):
    settings.REPORTS_MAX_ATTEMPTS = 1
    task = make_task()
    lose_worker(task, prompt_chars=4_000)
    task = refreshed(task)
    assert (task.status, task.error_type) == ("failed", "worker_lost")
    assert task.cost_status == "pending_reconciliation"
    assert_nothing_held(alice)


def test_a_lost_worker_that_streamed_text_is_settled_at_the_estimate(make_task, alice, settings):
    settings.REPORTS_MAX_ATTEMPTS = 1
    task = make_task()
    lose_worker(task, prompt_chars=4_000, text="x" * 400)
    task = refreshed(task)
    assert (task.status, task.error_type) == ("failed", "worker_lost")
    # 4,000 prompt characters and 400 received, at the estimate's characters a token.
    usage = estimated_usage(4_000, "x" * 400)
    cost = budgets.usage_cost("extractive", usage.input_tokens, usage.output_tokens, None)
    assert (task.cost_status, task.cost_micros) == ("settled", cost)
    attempt = Attempt.objects.get(task=task)
    assert (attempt.usage_source, attempt.cost_micros) == ("estimate", cost)
    assert (budget(alice).spent_micros, budget(alice).reserved_micros) == (cost, 0)


def test_a_lost_attempt_that_streamed_text_then_rerun_to_success_holds_nothing(
    make_task, alice, scripted_worker
):
    task = make_task()
    lose_worker(task, prompt_chars=4_000, text="Some text")
    assert refreshed(task).cost_status == "reserved"
    run_all(scripted_worker(whole_report))
    task = refreshed(task)
    assert (task.status, task.cost_status) == ("succeeded", "settled")
    assert task.cost_micros == sum(
        Attempt.objects.filter(task=task).values_list("cost_micros", flat=True)
    )
    assert_nothing_held(alice)


def test_a_lost_call_of_the_simulated_provider_died_with_its_worker_and_is_settled(
    make_task, alice, settings
):
    settings.REPORTS_MAX_ATTEMPTS = 1
    task = make_task()
    lose_worker(task, prompt_chars=4_000)  # the demo's server restarted before any text
    task = refreshed(task)
    usage = estimated_usage(4_000, "")
    cost = budgets.usage_cost("extractive", usage.input_tokens, usage.output_tokens, None)
    assert (task.cost_status, task.cost_micros) == ("settled", cost)


def test_a_lost_attempt_that_sent_nothing_rerun_to_success_still_waits_for_its_cost(
    make_task, alice, scripted_worker
):
    task = make_task()
    lose_worker(task, prompt_chars=None)
    run_all(scripted_worker(whole_report))
    task = refreshed(task)
    assert (task.status, task.cost_status) == ("succeeded", "pending_reconciliation")
    assert_nothing_held(alice)


def test_a_cost_above_the_reservation_is_charged_only_up_to_the_limit(
    make_task, alice, scripted_worker, settings
):
    settings.REPORTS_DEFAULT_BUDGET_MICROS = 10_000

    async def huge_usage(request, clock):
        async for item in whole_report(request, clock):
            if isinstance(item, Completed):
                item = Completed("stop", Usage(1_000_000, 0, None, "provider"))
            yield item

    task = make_task()
    run_all(scripted_worker(huge_usage))
    task = refreshed(task)
    assert task.cost_micros == 1_000_000  # the task records what it cost…
    assert budget(alice).spent_micros == 10_000  # …the budget never goes over its limit
    assert budget(alice).reserved_micros == 0


# --- submit --------------------------------------------------------------------------------


def test_an_exhausted_budget_answers_402_and_leaves_nothing_behind(alice_client, alice, make_task):
    first = make_task()
    Budget.objects.filter(user=alice).update(limit_micros=first.reserved_micros + 10)
    response = submit(alice_client)
    assert response.status_code == 402
    error = response.json()["error"]
    assert error["code"] == "budget_exhausted"
    assert "remaining budget (< $0.01)" in error["message"]  # 10 micro-dollars
    assert list(Task.objects.values_list("pk", flat=True)) == [first.pk]
    assert Document.objects.count() == 1
    assert len(stored_files("uploads")) == 1
    assert budget(alice).reserved_micros == first.reserved_micros


def test_the_api_task_body_says_the_cost_status(alice_client, worker):
    created = submit(alice_client)
    assert created.json()["cost_status"] == "reserved"
    run_all(worker)
    found = alice_client.get(f"/api/tasks/{created.json()['task_id']}").json()
    assert found["cost_status"] == "settled"


def test_a_budget_is_per_user(make_task, alice, bob):
    make_task()
    Budget.objects.filter(user=alice).update(
        limit_micros=Budget.objects.get(user=alice).reserved_micros
    )
    bobs = make_task(owner=bob)
    assert bobs.cost_status == "reserved"
    assert budget(bob).reserved_micros == bobs.reserved_micros


# --- the request actually sent --------------------------------------------------------------


def _expanding(document) -> None:
    """Under 50 KB zipped, 360,000 characters of text once read."""
    document.add_heading("Tidal energy in small harbours", 1)
    for _ in range(360):
        document.add_paragraph("Tidal power is predictable. " * 35 + "Harbours see two tides.")


EXPANDING_DOCX = samples.docx_bytes(_expanding)


class RealUsage:
    """Replies of the local OpenAI-compatible server that report the usage of the request
    they answer, at four bytes of prompt a token, as a real model's tokenizer would."""

    def __init__(self, server) -> None:
        self.server = server

    def __bool__(self) -> bool:
        return True

    def popleft(self) -> Reply:
        body = self.server.requests[-1].body
        sent = sum(len(m["content"].encode()) for m in body["messages"])
        prompt = sent // 4
        return Reply(
            usage={"prompt_tokens": prompt, "completion_tokens": 30, "total_tokens": prompt + 30}
        )


@pytest.fixture
def openai_worker(settings, worker_thread):
    server = OpenAIServer().start()
    server.replies = RealUsage(server)
    point_at(settings, server.base_url, read_timeout_s=30)
    settings.REPORTS_PRICES = {**settings.REPORTS_PRICES, "test-model": PRICE}
    yield server, Supervisor(slots=5, clock=Clock())
    server.stop()


def test_expanding_documents_in_parallel_never_cost_more_than_the_budget(
    alice_client, alice, settings, openai_worker
):
    server, worker = openai_worker
    settings.REPORTS_MAX_OUTPUT_TOKENS = 2_000
    settings.REPORTS_DEFAULT_BUDGET_MICROS = limit = 300_000  # $0.30
    assert len(EXPANDING_DOCX) < 50_000
    for n in range(5):  # each reserves little at submit: the upload is small
        response = submit(alice_client, upload(f"harbours-{n}.docx", EXPANDING_DOCX))
        assert response.status_code == 201, response.content

    run_all(worker)

    tasks = list(Task.objects.all())
    costs = [t.cost_micros for t in tasks]
    succeeded = [t for t in tasks if t.status == "succeeded"]
    refused = [t for t in tasks if t.status == "failed"]
    # Each run is far dearer than its submit estimate: not all five fit the budget...
    assert succeeded and refused
    assert {(t.error_type, t.cost_status, t.cost_micros) for t in refused} == {
        ("budget_exhausted", "released", 0)
    }
    assert "cannot cover this report" in refused[0].user_message
    # ...those refused never reached the provider, and the money that went out was reserved:
    assert len(server.requests) == sum(t.plan["calls"] for t in succeeded)
    assert all(t.cost_micros > 50_000 for t in succeeded)  # real usage, about $0.09 each
    assert sum(costs) <= limit
    assert budget(alice).spent_micros == sum(costs)  # nothing charged beyond a reservation


def test_a_free_model_settles_at_zero_even_when_its_usage_is_unknown(make_task, alice, settings):
    settings.REPORTS_PRICES = {"extractive": {"input": 0, "output": 0, "cached_input": 0}}
    settings.REPORTS_RERUN_LOST_ATTEMPTS = False
    task = make_task()
    claim_next_task("w")
    Task.objects.filter(pk=task.pk).update(lease_expires_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    reap_expired_leases()
    task = refreshed(task)
    assert task.status == "reconciliation_required"  # the outcome is unknown…
    assert (task.cost_status, task.cost_micros) == ("released", 0)  # …but it cost nothing
    assert budget(alice).reserved_micros == 0


def test_a_free_model_that_wrote_a_report_is_settled_at_zero_not_released(
    make_task, alice, settings, scripted_worker
):
    # Its usage was measured: the report cost nothing, which is not the same as a task
    # that never used the model (released).
    settings.REPORTS_PRICES = {"extractive": {"input": 0, "output": 0, "cached_input": 0}}
    task = make_task()
    run_all(scripted_worker(whole_report))
    task = refreshed(task)
    assert (task.status, task.cost_status, task.cost_micros) == ("succeeded", "settled", 0)
    assert presentation.cost_words(task) == "cost nothing"  # not "cost $0.00"


def test_a_report_of_a_free_model_holds_nothing_and_says_so_while_it_runs(make_task, settings):
    settings.REPORTS_PRICES = {"extractive": {"input": 0, "output": 0, "cached_input": 0}}
    task = make_task()
    claim_next_task("w")
    task = refreshed(task)
    assert (task.cost_status, task.reserved_micros) == ("reserved", 0)
    assert presentation.cost_words(task) == "free: its model has no price"


@pytest.mark.django_db(transaction=True)
async def test_a_cancelled_report_never_costs_more_than_the_whole_one(
    make_task, alice_client, scripted_worker, clock
):
    # The same document twice through the simulated model: once whole, once cancelled after
    # its first text. The cancel's usage is an estimate (no usage came); it must count the
    # prompt as the finished call's usage counts it.
    model = SimulatedProvider(clock=clock)
    writing = asyncio.Event()

    async def whole(request, clock):
        async for item in model.stream(request):
            yield item

    async def cut_short(request, clock):
        async for item in model.stream(request):
            yield item
            if isinstance(item, TextDelta):
                await clock.sleep(1)  # past the flush interval: the text is saved
                writing.set()
                await asyncio.Event().wait()  # still connected, no usage yet

    full = await sync_to_async(make_task)()
    run = scripted_worker(whole)
    assert await run.claim_and_start()
    await run.wait_for_attempts()
    cancelled = await sync_to_async(make_task)()
    run = scripted_worker(cut_short)
    assert await run.claim_and_start()
    await writing.wait()
    response = await sync_to_async(alice_client.post)(f"/api/tasks/{cancelled.pk}/cancel")
    assert response.status_code == 202
    await run.wait_for_attempts()

    full, cancelled = [await sync_to_async(refreshed)(t) for t in (full, cancelled)]
    assert (full.status, cancelled.status) == ("succeeded", "cancelled")
    whole_usage, cut_usage = [
        await sync_to_async(lambda t: t.attempts.get())(t) for t in (full, cancelled)
    ]
    assert cut_usage.usage_source == "estimate"
    assert cut_usage.input_tokens == whole_usage.input_tokens
    assert cut_usage.output_tokens < whole_usage.output_tokens
    assert 0 < cancelled.cost_micros < full.cost_micros
