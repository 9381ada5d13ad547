"""The worker: claims, caps, cancel, fencing, the reaper, deadlines and stalls."""

import asyncio
import datetime as dt
import logging
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from reports import events, lifecycle, storage, threads, wakeups
from reports.models import Attempt, Status, Task, TaskEvent, TaskQuerySet
from reports.providers.base import Completed, Heartbeat, TextDelta
from reports.streaming import broadcast
from reports.worker import leases, pipeline, prepared, supervisor
from reports.worker.leases import claim_next_task, reap_expired_leases
from tests.helpers import (
    REPORT,
    expire_lease,
    report_body,
    run_all,
    saved_report,
    wait_for,
    whole_report,
)

db = sync_to_async
async_db = pytest.mark.django_db(transaction=True)


HALF = "# Half a rep"


def half_written(make_task) -> Task:
    """A task whose attempt wrote `HALF` and whose worker then died (its lease not yet
    expired: the test says when)."""
    task = make_task()
    claim = claim_next_task("a-worker-that-dies")
    Task.objects.append_event(task.pk, claim.epoch, events.delta(HALF))
    return task


@pytest.mark.django_db
def test_a_second_claim_finds_nothing_once_the_task_is_taken(make_task):
    make_task()
    assert claim_next_task("worker-a") is not None
    assert claim_next_task("worker-b") is None


@pytest.mark.django_db
def test_a_look_that_finds_no_work_is_one_read_that_locks_nothing(make_task):
    """An idle worker looks for work at every poll and after every attempt's end: a look
    that finds nothing must not take the write lock every upload and chunk write needs."""
    make_task()
    assert claim_next_task("worker-a") is not None
    waiting = make_task()
    Task.objects.filter(pk=waiting.pk).update(not_before=timezone.now() + dt.timedelta(hours=1))
    with CaptureQueriesContext(connection) as looked:
        assert claim_next_task("worker-b") is None
    assert [q["sql"].split()[0] for q in looked.captured_queries] == ["SELECT"]


@pytest.mark.django_db
def test_claims_respect_lane_and_global_caps(make_task, settings):
    settings.REPORTS_LANE_LIMITS = {"short": 2, "long": 1}
    settings.REPORTS_MAX_RUNNING = 3
    settings.REPORTS_LONG_LANE_BYTES = 1000
    for _ in range(3):
        make_task()
    for _ in range(2):
        make_task(content="# Long\n\n" + "words and more words. " * 100)
    claims = [c for c in (claim_next_task("w") for _ in range(5)) if c is not None]
    assert sorted(c.lane for c in claims) == ["long", "short", "short"]
    assert Task.objects.filter(status="running").count() == 3


@pytest.mark.django_db
def test_caps_count_live_leases_only(make_task, settings):
    settings.REPORTS_MAX_RUNNING = 1
    first, second = make_task(), make_task()
    assert claim_next_task("w").task_id == first.pk
    assert claim_next_task("w") is None
    expire_lease(first)  # its worker died: the slot is free again
    assert claim_next_task("w").task_id == second.pk


@pytest.mark.django_db
def test_cancel_of_a_queued_task_is_immediate(make_task, alice_client):
    task = make_task()
    response = alice_client.post(f"/api/tasks/{task.pk}/cancel")
    assert response.status_code == 202
    assert response.json()["status"] == "cancelled"
    assert alice_client.post(f"/api/tasks/{task.pk}/cancel").status_code == 202
    assert claim_next_task("w") is None
    assert list(TaskEvent.objects.filter(task=task).values_list("type", "data")) == [
        ("cancelled", {"partial": False, "attempt": 0})
    ]


@pytest.mark.django_db
def test_a_queued_task_cancelled_after_its_lost_attempt_wrote_text_says_so(make_task, alice_client):
    task = half_written(make_task)
    expire_lease(task)
    reap_expired_leases()  # queued for another attempt, the first one's text kept and shown
    body = alice_client.post(f"/api/tasks/{task.pk}/cancel").json()
    assert (body["status"], body["text_length"], body["partial"]) == ("cancelled", 12, True)
    terminal = TaskEvent.objects.filter(task=task).last()
    assert (terminal.type, terminal.data["partial"]) == ("cancelled", True)


@pytest.mark.django_db
def test_cancel_of_a_finished_task_is_refused(make_task, alice_client, worker):
    task = make_task()
    run_all(worker)
    response = alice_client.post(f"/api/tasks/{task.pk}/cancel")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "task_finished"


@async_db
async def test_cancel_of_a_running_task_stops_it_and_keeps_partial_text(make_task, scripted_worker):
    task = await db(make_task)()
    streaming = asyncio.Event()
    closed = asyncio.Event()

    async def endless(request, clock):
        try:
            yield TextDelta("# Partial\n\nfirst words")
            await clock.sleep(1)  # past the flush interval
            yield TextDelta(" more")
            streaming.set()
            await asyncio.Event().wait()  # the provider goes quiet, still connected
        finally:
            closed.set()

    worker = scripted_worker(endless)
    assert await worker.claim_and_start()
    await streaming.wait()
    assert await db(lambda: lifecycle.cancel_task(Task.objects.get(pk=task.pk)))()
    await worker.wait_for_attempts()
    assert closed.is_set()  # the provider stream was closed, not left running
    task = await db(Task.objects.get)(pk=task.pk)
    assert task.status == "cancelled"
    attempt = await db(Attempt.objects.get)(task=task)
    assert attempt.text == "# Partial\n\nfirst words more"
    terminal = await db(TaskEvent.objects.filter(task=task).last)()
    assert (terminal.type, terminal.data["partial"]) == ("cancelled", True)


@async_db
async def test_a_worker_that_lost_its_lease_writes_nothing_more(
    make_task, scripted_worker, settings
):
    # No heartbeat during the test (its own thread could renew the lease between the test
    # expiring it and reaping it): the lease is lost only where the test says.
    settings.REPORTS_LEASE_S = 600
    task = await db(make_task)()
    first_chunk_saved = asyncio.Event()
    resume = asyncio.Event()

    async def script(request, clock):
        yield TextDelta("# One\n\n")
        await clock.sleep(1)
        first_chunk_saved.set()  # the first text is written at once, before the next item
        await resume.wait()
        yield TextDelta("two ")
        yield TextDelta("three")
        await clock.sleep(1)
        yield Completed("stop")

    worker = scripted_worker(script)
    assert await worker.claim_and_start()
    (attempt,) = worker.running.values()
    await first_chunk_saved.wait()
    # The chunk is written on the worker's own lane, which renews the lease as it commits:
    # expire the lease only once that write is in.
    await db(wait_for)(
        lambda: TaskEvent.objects.filter(task=task, type="delta").exists(), "the first chunk"
    )
    await db(expire_lease)(task)
    assert await db(reap_expired_leases)()  # back to queued: attempt 1 is over
    events_before = await db(TaskEvent.objects.filter(task=task).count)()
    resume.set()
    await worker.wait_for_attempts()
    assert attempt.result().lease_lost
    task = await db(Task.objects.get)(pk=task.pk)
    assert task.status == "queued"
    assert await db(TaskEvent.objects.filter(task=task).count)() == events_before
    assert task.result_id is None


@pytest.mark.django_db
def test_renewing_a_lost_lease_raises_lease_lost(make_task):
    make_task()
    claim = claim_next_task("w")
    Task.objects.filter(pk=claim.task_id).update(epoch=claim.epoch + 1)
    with pytest.raises(leases.LeaseLost):
        leases.renew_lease(claim.task_id, claim.epoch)
    assert Task.objects.append_event(claim.task_id, claim.epoch, events.delta("x")) is None


@pytest.mark.django_db
def test_reaper_turns_expired_lease_into_new_attempt_then_worker_lost(make_task, settings):
    settings.REPORTS_MAX_ATTEMPTS = 2
    task = make_task()
    for number in (1, 2):
        claim = claim_next_task("w")
        assert claim.number == number
        Task.objects.append_event(claim.task_id, claim.epoch, events.delta(f"part {number}"))
        expire_lease(task)
        assert len(reap_expired_leases()) == 1
    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", "worker_lost")
    attempts = list(Attempt.objects.filter(task=task).values_list("status", "text", "usage_source"))
    assert attempts == [("interrupted", "part 1", "missing"), ("interrupted", "part 2", "missing")]


@pytest.mark.django_db
def test_reaper_leaves_live_leases_alone(make_task):
    make_task()
    claim_next_task("w")
    assert reap_expired_leases() == []


@pytest.mark.django_db
def test_a_cancel_asked_before_its_worker_died_ends_the_task_instead_of_running_it_again(
    make_task, caplog
):
    task = half_written(make_task)
    assert lifecycle.cancel_task(task)  # 202: asked; its worker dies before it reads it
    expire_lease(task)
    with caplog.at_level(logging.INFO):
        reap_expired_leases()
    [line] = [r for r in caplog.records if r.getMessage() == "attempt.ended"]
    # Its line says where the task went, as its rows do: not back to the queue.
    assert (line.event_fields["status"], line.event_fields["task_status"]) == (
        "interrupted",
        "cancelled",
    )
    assert claim_next_task("w") is None  # no second attempt runs it
    task.refresh_from_db()
    assert task.status == "cancelled"
    terminal = TaskEvent.objects.filter(task=task).last()
    assert (terminal.type, terminal.data["partial"]) == ("cancelled", True)
    attempt = Attempt.objects.get(task=task)
    assert (attempt.status, attempt.error_type, attempt.text) == (
        "interrupted",
        "worker_lost",
        HALF,
    )


@pytest.mark.django_db
def test_a_cancel_asked_while_an_attempt_failed_retryably_ends_the_task_without_a_retry(
    make_task,
):
    task = make_task()
    claim = claim_next_task("w")
    assert lifecycle.cancel_task(task)  # asked while the provider answers 429
    retry = events.requeued(retry_after_s=0, reason="rate_limited")
    ended = lifecycle.requeue_task(task.pk, Status.RUNNING, retry, expect_epoch=claim.epoch)
    assert ended.type == "cancelled"
    assert claim_next_task("w") is None
    task.refresh_from_db()
    assert task.status == "cancelled"


@pytest.mark.django_db
def test_lost_attempt_needs_reconciliation_when_reruns_are_off(make_task, settings):
    settings.REPORTS_RERUN_LOST_ATTEMPTS = False
    task = make_task()
    claim_next_task("w")
    expire_lease(task)
    reap_expired_leases()
    task.refresh_from_db()
    assert task.status == "reconciliation_required"


@pytest.mark.django_db
def test_restart_mid_task_reruns_and_the_report_is_the_new_attempts_text_alone(
    make_task, scripted_worker
):
    task = half_written(make_task)
    expire_lease(task)  # the process died; nothing renews the lease
    reap_expired_leases()
    run_all(scripted_worker(whole_report))
    task.refresh_from_db()
    assert task.status == "succeeded"
    assert report_body(saved_report(task)) == REPORT.rstrip()
    first, second = Attempt.objects.filter(task=task).order_by("number")
    assert (first.status, first.text) == ("interrupted", HALF)
    assert (second.status, second.text) == ("succeeded", REPORT)
    seqs = list(TaskEvent.objects.filter(task=task).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.django_db
def test_deadline_counts_time_spent_queued(make_task, worker, settings):
    settings.REPORTS_TASK_DEADLINE_S = 60
    task = make_task()
    Task.objects.filter(pk=task.pk).update(created_at=task.created_at - dt.timedelta(seconds=61))
    run_all(worker)
    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", "timeout")


@pytest.mark.django_db
def test_deadline_stops_a_slow_stream_keeping_its_text(make_task, scripted_worker, settings):
    settings.REPORTS_TASK_DEADLINE_S = 60

    async def crawl(request, clock):
        yield TextDelta("# Slow\n\n")
        while True:
            await clock.sleep(10)  # ten seconds of the injected clock per word
            yield TextDelta("word ")

    task = make_task()
    run_all(scripted_worker(crawl))
    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", "timeout")
    text = Attempt.objects.get(task=task).text
    assert text.startswith("# Slow") and 4 <= text.count("word") <= 6


@pytest.mark.django_db
def test_heartbeats_without_text_end_as_stalled(make_task, scripted_worker, settings):
    settings.REPORTS_STALL_TIMEOUT_S = 30

    async def stall(request, clock):
        yield TextDelta("# Started\n\n")
        while True:
            await clock.sleep(5)
            yield Heartbeat()

    task = make_task()
    run_all(scripted_worker(stall))
    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", "stalled")
    assert Attempt.objects.get(task=task).text == "# Started\n\n"


@pytest.mark.django_db
def test_no_answer_after_the_request_was_sent_is_an_unknown_outcome(unanswered_task):
    task = unanswered_task
    assert task.status == "reconciliation_required"
    assert claim_next_task("w") is None  # never silently retried


@pytest.mark.django_db
def test_finish_reason_length_counts_as_truncated(make_task, scripted_worker):
    async def capped(request, clock):
        yield TextDelta(REPORT)
        yield Completed("length")

    task = make_task()
    run_all(scripted_worker(capped))
    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", "stream_truncated")


@pytest.mark.django_db
def test_a_new_task_reaches_its_call_after_its_claim_and_one_write_on_the_shared_thread(
    make_task, scripted_worker, monkeypatch
):
    """A claim reads what its task holds in the same trip; between it and the provider's
    call an attempt stores what it made (with the prompt's length, kept before the call):
    each trip to a database thread is a wait the first text adds."""
    trips: list[str] = []
    on_shared_db = threads.on_shared_db

    def counted(fn):
        trips.append(getattr(fn, "__name__", repr(fn)))
        return on_shared_db(fn)

    def counted_on_worker_thread(fn, **_):
        trips.append(f"worker thread: {getattr(fn, '__name__', repr(fn))}")
        return on_shared_db(fn)

    at_call: list[list[str]] = []

    async def report(request, clock):
        at_call.append(list(trips))
        async for item in whole_report(request, clock):
            yield item

    task = make_task()
    worker = scripted_worker(report)
    monkeypatch.setattr(threads, "on_shared_db", counted)
    monkeypatch.setattr(supervisor, "on_shared_db", counted)
    # The worker's own thread runs on this test's shared one (one transaction).
    monkeypatch.setattr(threads, "on_worker_thread", counted_on_worker_thread)
    run_all(worker)

    task.refresh_from_db()
    assert task.status == "succeeded"
    # The claim, with what the task holds; the document read, marked while it is; its
    # text, kept for its owner; what the attempt made. The provider's reading rate came
    # with the claim.
    assert at_call == [
        [
            "claim_and_read",
            "worker thread: mark_parsing",
            "store_prepared_text",
            "worker thread: mark_parsing",
            "store_made",
        ]
    ]
    assert task.attempts.get().prompt_chars > 0


@pytest.mark.django_db
def test_a_read_that_failed_with_the_claim_is_made_again_by_the_attempt(
    make_task, scripted_worker, monkeypatch
):
    read_stored, reads = prepared.read_stored, []

    def fails_once(claim):
        reads.append(claim.task_id)
        if len(reads) == 1:
            raise DatabaseError("the connection dropped")
        return read_stored(claim)

    monkeypatch.setattr(prepared, "read_stored", fails_once)
    task = make_task()
    run_all(scripted_worker(whole_report))
    task.refresh_from_db()
    assert task.status == "succeeded"
    assert reads == [task.pk, task.pk]


@pytest.mark.django_db
@pytest.mark.usefixtures("writes_in_step")
def test_deltas_are_coalesced_into_few_events(make_task, scripted_worker):
    async def tiny_tokens(request, clock):
        yield TextDelta("# Title\n\n## Summary\n\nText.\n\n## More\n\n")
        for i in range(2000):
            yield TextDelta(f"w{i} ")  # new words: "ab ab ab" would be a loop, and stopped
            await clock.sleep(0.005)  # 200 tokens a second
        yield Completed("stop")

    task = make_task()
    run_all(scripted_worker(tiny_tokens))
    deltas = TaskEvent.objects.filter(task=task, type="delta").count()
    assert Task.objects.get(pk=task.pk).status == "succeeded"
    assert 10 <= deltas <= 2000 // 15  # about one event per 100 ms, not one per token
    assert TaskEvent.objects.attempt_text(task.pk, 1).rstrip() == report_body(saved_report(task))


@pytest.mark.django_db
@pytest.mark.usefixtures("writes_in_step")
def test_the_first_moments_of_text_go_out_delta_by_delta(make_task, scripted_worker):
    async def tokens_every_20_ms(request, clock):
        yield TextDelta("# Title\n\n## Summary\n\nText.\n\n## More\n\n")
        for i in range(100):
            await clock.sleep(0.02)
            yield TextDelta(f"t{i} ")
        yield Completed("stop")

    task = make_task()
    run_all(scripted_worker(tokens_every_20_ms))
    deltas = [e.data["text"] for e in TaskEvent.objects.filter(task=task, type="delta")]
    # 150 ms of text at a delta every 20 ms: the heading and seven tokens, one event
    # each (a page shows each in its own frame); after that, about 100 ms a chunk.
    assert deltas[:8] == ["# Title\n\n## Summary\n\nText.\n\n## More\n\n"] + [
        f"t{i} " for i in range(7)
    ]
    assert len(deltas) <= 8 + 20 + 1  # the other 1.85 s of text: about 19 chunks
    assert Task.objects.get(pk=task.pk).status == "succeeded"


@pytest.mark.django_db
def test_a_slow_write_does_not_hold_the_stream_and_what_came_meanwhile_goes_out_whole(
    make_task, scripted_worker, monkeypatch
):
    held, release = threading.Event(), threading.Event()
    append_events = TaskQuerySet.append_events

    def slow_first_word(self, appends, **kind):
        if any(draft.data.get("text") == "w0 " for _, _, draft in appends):
            held.set()
            release.wait(10)  # let go by the script; the bound only ends a failing run
        return append_events(self, appends, **kind)

    monkeypatch.setattr(TaskQuerySet, "append_events", slow_first_word)

    async def words_during_a_slow_write(request, clock):
        yield TextDelta("# Title\n\n## Summary\n\n")
        await clock.sleep(0.01)  # the title is written alone (deltas of one instant go together)
        yield TextDelta("w0 ")
        await asyncio.to_thread(held.wait, 10)
        for i in range(1, 41):  # 0.8 s of text while that write is held
            await clock.sleep(0.02)
            yield TextDelta(f"w{i} ")
        release.set()
        yield Completed("stop")

    task = make_task()
    run_all(scripted_worker(words_during_a_slow_write))
    deltas = [e.data["text"] for e in TaskEvent.objects.filter(task=task, type="delta")]
    assert release.is_set()  # the runner read all 40 words while the write was held
    assert deltas[:2] == ["# Title\n\n## Summary\n\n", "w0 "]
    # What came meanwhile: one write once the slow one ended (and what the end flushed).
    assert len(deltas) <= 4
    assert "".join(deltas[2:]) == "".join(f"w{i} " for i in range(1, 41))


@pytest.mark.django_db
@pytest.mark.timeout(30)
@pytest.mark.parametrize("clock_reads", [0, 61, 1000, 3000])
def test_an_attempt_ends_whatever_the_clock_reads(make_task, scripted_worker, clock, clock_reads):
    # A flush or limit falls due at `start + limit`; at some clock values `now - start`
    # is then a hair under `limit` (floating point). The runner once waited for that
    # instant with a zero timeout, forever, and never took the item already waiting.
    clock.advance(clock_reads)
    task = make_task()
    run_all(scripted_worker(whole_report))
    assert Task.objects.get(pk=task.pk).status == "succeeded"
    assert report_body(saved_report(task)) == REPORT.rstrip()


@pytest.mark.django_db
def test_success_is_written_only_after_the_file_is_saved(make_task, worker, monkeypatch):
    def broken_disk(result_id, text):
        raise OSError("disk full")

    monkeypatch.setattr(storage, "save_result", broken_disk)
    task = make_task()
    run_all(worker)
    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", "save_failed")
    assert Attempt.objects.get(task=task).text  # the whole text stays, marked incomplete
    assert task.result_id is None


def test_status_values_are_the_contract():
    assert set(Status.values) == {
        "queued",
        "running",
        "finalizing",
        "succeeded",
        "failed",
        "cancelled",
        "reconciliation_required",
    }


@pytest.mark.django_db
def test_the_same_file_is_parsed_once_per_owner(make_task, worker, bob, monkeypatch):
    from reports.parsers.markdown import MarkdownParser

    calls = []
    original = MarkdownParser.extract
    monkeypatch.setattr(
        MarkdownParser, "extract", lambda self, data: calls.append(1) or original(self, data)
    )
    make_task(), make_task()
    run_all(worker)
    assert len(calls) == 1
    make_task(owner=bob)  # never shared across users
    run_all(worker)
    assert len(calls) == 2
    assert set(Task.objects.values_list("status", flat=True)) == {"succeeded"}


@async_db
async def test_text_waiting_when_cancel_arrives_is_kept(make_task, scripted_worker, monkeypatch):
    task = await db(make_task)()
    released = asyncio.Event()
    publish = broadcast.publish

    async def held_publish(events):
        if any(event.type == "delta" for event in events):
            await released.wait()  # the runner is busy with the first text…
        await publish(events)

    monkeypatch.setattr(broadcast, "publish", held_publish)

    async def text_then_cancel(request, clock):
        yield TextDelta("# Partial\n\nfirst words")
        yield TextDelta(" and the rest")  # …while this waits in the runner's queue
        wakeups.notify(request.task_id)  # the user cancels
        await asyncio.sleep(0)  # the cancel reaches the runner
        released.set()
        await asyncio.Event().wait()

    worker = scripted_worker(text_then_cancel)
    assert await worker.claim_and_start()
    await worker.wait_for_attempts()
    task = await db(Task.objects.get)(pk=task.pk)
    assert task.status == "cancelled"
    attempt = await db(Attempt.objects.get)(task=task)
    assert attempt.text == "# Partial\n\nfirst words and the rest"


@pytest.mark.parametrize(("wrote_just_now", "renewals"), [(True, 0), (False, 3)])
async def test_a_beat_renews_only_a_lease_no_write_renewed_within_its_interval(
    monkeypatch, wrote_just_now, renewals
):
    """A streaming attempt's chunk writes renew its lease: its beats write nothing. A
    quiet one (reading the prompt, validating) is renewed at every beat."""
    renewed = []
    monkeypatch.setattr(leases, "renew_lease", lambda task_id, epoch: renewed.append(task_id))
    beats = 0

    async def beat(_interval):  # the heartbeat's wait: three beats, then the attempt ends
        nonlocal beats
        beats += 1
        if beats > 3:
            raise asyncio.CancelledError
        if wrote_just_now:
            run.renewed_at = supervisor.time.monotonic()

    class Run:
        task_id, renewed_at, claim = "a-task", float("-inf"), type("Claim", (), {"epoch": 1})

        def request_stop(self, reason):
            raise AssertionError(f"asked to stop: {reason}")

    run = Run()
    monkeypatch.setattr(supervisor, "asyncio", type("Waits", (), {"sleep": staticmethod(beat)}))
    with pytest.raises(asyncio.CancelledError):
        await supervisor.Supervisor._heartbeat(None, run)
    assert len(renewed) == renewals


@async_db
async def test_a_worker_starts_even_when_no_parse_child_can_start_ahead(monkeypatch):
    from reports.parsers import sandbox
    from reports.worker.supervisor import Supervisor

    def refused(warm):
        raise OSError("Resource temporarily unavailable")

    monkeypatch.setattr(sandbox, "_spare", sandbox._Spare())
    monkeypatch.setattr(sandbox, "_start", refused)
    looking = asyncio.Event()

    async def looks_for_work(self):
        looking.set()

    monkeypatch.setattr(Supervisor, "_loop", looks_for_work)
    await Supervisor(slots=1).run_forever()
    assert looking.is_set()


async def two_reports_in_the_web_server(scripted_worker) -> list[str]:
    """Run the two queued tasks to their end in a worker whose attempts finish one at a
    time, as the one embedded in the web server; return the tasks' statuses."""

    async def whole(request, clock):
        yield TextDelta(REPORT)
        yield Completed("stop")

    worker = scripted_worker(whole)
    worker.finishing = asyncio.Lock()
    assert await worker.claim_and_start()
    assert await worker.claim_and_start()
    await worker.wait_for_attempts()
    return await db(lambda: list(Task.objects.values_list("status", flat=True)))()


@async_db
async def test_reports_that_end_together_in_the_web_server_are_finished_one_at_a_time(
    make_task, scripted_worker, monkeypatch
):
    # Their validation, rendering, save and end take turns: the loop that carries every
    # page's text takes turns with one of them, not with all.
    await db(make_task)()
    await db(make_task)()
    both_ended = threading.Event()  # both streams are over, both reports want finishing
    arrived, steps = [], []
    finalize, validate, write_end = (
        pipeline.AttemptRun._finalize,
        pipeline.validate_report,
        pipeline.write_end,
    )

    async def finalizing(run):
        arrived.append(run.task_id)
        if len(arrived) == 2:
            both_ended.set()
        return await finalize(run)

    def validating(report, **options):
        steps.append("validate")
        if len(steps) == 1:
            assert both_ended.wait(timeout=10)  # the other report is ready meanwhile
        return validate(report, **options)

    def ending(*args, **options):
        ended = write_end(*args, **options)
        steps.append("end")
        return ended

    monkeypatch.setattr(pipeline.AttemptRun, "_finalize", finalizing)
    monkeypatch.setattr(pipeline, "validate_report", validating)
    monkeypatch.setattr(pipeline, "write_end", ending)

    statuses = await two_reports_in_the_web_server(scripted_worker)
    assert steps == ["validate", "end", "validate", "end"]
    assert statuses == ["succeeded", "succeeded"]


@async_db
async def test_a_finish_that_hangs_holds_the_next_report_up_for_a_bounded_wait_not_until_it_ends(
    make_task, scripted_worker, monkeypatch
):
    # One report's save stops answering (an object store that hangs): the report that ended
    # after it waits its turn for a while, then finishes beside it, and its user gets it.
    await db(make_task)()
    await db(make_task)()
    monkeypatch.setattr(pipeline, "FINISH_TURN_WAIT_S", 0.05)
    other_ended = threading.Event()
    hung, ended = [], []
    save, write_end = storage.save_result, pipeline.write_end

    def saving(result_id, report):
        if not hung:
            hung.append(result_id)
            assert other_ended.wait(timeout=10)  # hangs until the other report has ended
        return save(result_id, report)

    def ending(*args, **options):
        result = write_end(*args, **options)
        ended.append(result)
        if len(ended) == 1:
            other_ended.set()
        return result

    monkeypatch.setattr(storage, "save_result", saving)
    monkeypatch.setattr(pipeline, "write_end", ending)

    statuses = await two_reports_in_the_web_server(scripted_worker)
    assert other_ended.is_set()
    assert statuses == ["succeeded", "succeeded"]
