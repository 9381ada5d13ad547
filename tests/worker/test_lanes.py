"""Nothing one attempt does holds up another's stream (docs/architecture.md, lanes of work).

A slow document, a report at the size cap being validated and rendered, or a shared
database thread held busy: another task's text keeps flowing (its largest gap between two
delta events stays under a second) and no live lease expires. Real clock, real parses.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connection, connections

from reports import lanes, submissions
from reports.clock import Clock
from reports.models import Attempt, Event, Status, Task, TaskEvent
from reports.providers.base import Completed, TextDelta, Usage
from reports.streaming import broadcast, follower
from reports.submissions import Submission, Upload
from reports.worker.leases import reap_expired_leases
from reports.worker.supervisor import Supervisor
from tests.helpers import ScriptedProvider, wait_for
from tests.security import hostile

pytestmark = pytest.mark.django_db(transaction=True)

MAX_GAP_S = 1.0
PARSE_TIMEOUT_S = 3  # the slow document is stopped by its wall-clock limit, after this long
# Room enough that PDFium does not fail for memory first (it did after 1.4 s on a fast
# machine under the default 1 GB): the parse lasts PARSE_TIMEOUT_S whatever the machine.
PARSE_MEMORY_MB = 16_384
OPENING = "# Report\n\n## Summary\n\nIt works.\n\n## Details\n\n"


def slow_pdf() -> bytes:
    """Return a small PDF whose text takes PDFium far longer than PARSE_TIMEOUT_S to read
    (twelve million text operators: some 16 s on a fast machine, given the memory it
    wants). Build it before the streams start: building it is CPU work of the test's own."""
    return hostile.pdf_that_explodes(operators=12_000_000)


def big_report(kb: int = 195) -> str:
    """Return a valid report of about `kb` KiB, dense with Markdown: slow to check and render."""
    line = "- **item** with `code`, a [link](https://example.com/a) and *emphasis* _here_\n"
    return OPENING + line * ((kb * 1024 - len(OPENING)) // len(line))


def submit_file(owner, name: str, data: bytes) -> Task:
    extension = name[name.rindex(".") :]
    submission = Submission((Upload(name, extension, data),), "", "ok", None)
    task, _ = submissions.submit(owner, submission)
    return task


def largest_gap_s(task: Task) -> float:
    """Return the largest gap between two of the task's delta events, as written."""
    times = list(
        TaskEvent.objects.filter(task=task, type="delta")
        .order_by("seq")
        .values_list("created_at", flat=True)
    )
    assert len(times) > 10, "the stream was too short to measure"
    return max((b - a).total_seconds() for a, b in itertools.pairwise(times))


def deltas(task: Task) -> int:
    return TaskEvent.objects.filter(task=task, type="delta").count()


class Streams:
    """A provider script: one task's report arrives at once (`big`), every other task's
    streams a word every 50 ms until `stop()`."""

    def __init__(self, big: str = "") -> None:
        self.big = big
        self.big_task_id = ""
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def __call__(self, request, clock):
        if request.task_id == self.big_task_id:
            for i in range(0, len(self.big), 10_000):
                yield TextDelta(self.big[i : i + 10_000])
        else:
            yield TextDelta(OPENING)
            for _ in range(1200):  # a minute at most
                if self._stop.is_set():
                    break
                yield TextDelta("word ")
                await clock.sleep(0.05)
        yield Completed("stop", Usage(10, 20, None, "provider"))


async def elsewhere(fn):
    """Return fn(), run in a thread and on a connection of its own, as another process
    would: never on the shared database thread, which a test may hold."""

    def call():
        try:
            return fn()
        finally:
            connection.close()

    return await sync_to_async(call, thread_sensitive=False)()


async def wait_until(condition, what: str):
    """Poll `condition` until true, for a minute at most."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if value := await elsewhere(condition):
            return value
        await asyncio.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


async def stream_beside(worker: Supervisor, streams: Streams, streaming: Task, make_other):
    """Start `streaming`, then the task `make_other()` beside it in the same worker; wait
    for the other to end, then let the stream end. Return the other task."""
    assert await worker.claim_and_start()
    await wait_until(lambda: deltas(streaming) >= 5, "the first stream to flow")
    other = await sync_to_async(make_other)()
    streams.big_task_id = str(other.pk)
    assert await worker.claim_and_start()
    await wait_until(
        lambda: Task.objects.filter(pk=other.pk, finished_at__isnull=False).exists(),
        "the other task to end",
    )
    flowed = await elsewhere(lambda: deltas(streaming))
    await wait_until(lambda: deltas(streaming) >= flowed + 5, "text after it")
    streams.stop()
    await worker.wait_for_attempts()
    return await sync_to_async(Task.objects.get)(pk=other.pk)


async def test_a_slow_document_does_not_stop_another_stream(alice, make_task, settings):
    settings.REPORTS_PARSE_TIMEOUT_S = PARSE_TIMEOUT_S
    settings.REPORTS_PARSE_MEMORY_MB = PARSE_MEMORY_MB
    streams, clock = Streams(), Clock()
    worker = Supervisor(slots=2, clock=clock, provider=ScriptedProvider(streams, clock))
    streaming = await sync_to_async(make_task)()
    document = slow_pdf()

    slow = await stream_beside(
        worker,
        streams,
        streaming,
        lambda: submit_file(alice, "slow.pdf", document),
    )

    assert (slow.status, slow.error_type) == ("failed", "invalid_input")
    # Stopped by its wall-clock limit, well past MAX_GAP_S: long enough that the stream
    # beside it would have shown it as a gap over MAX_GAP_S, had the parse held it up.
    assert (slow.finished_at - slow.claimed_at).total_seconds() >= 1.5 * MAX_GAP_S
    await sync_to_async(streaming.refresh_from_db)()
    assert streaming.status == Status.SUCCEEDED
    assert await sync_to_async(largest_gap_s)(streaming) < MAX_GAP_S


async def test_a_report_at_the_size_cap_being_checked_does_not_stop_another_stream(
    alice, make_task, settings
):
    settings.REPORTS_MAX_REPORT_KB = 200
    streams, clock = Streams(big=big_report()), Clock()
    worker = Supervisor(slots=2, clock=clock, provider=ScriptedProvider(streams, clock))
    streaming = await sync_to_async(make_task)()

    big = await stream_beside(
        worker, streams, streaming, lambda: make_task(content="# Another\n\nplease.\n")
    )

    assert big.status == Status.SUCCEEDED
    attempt = await sync_to_async(Attempt.objects.get)(task=big)
    # On the event loop, this would be a gap in every other stream (0.9 s on a quiet machine).
    checked_ms = attempt.stage_ms["validate"] + attempt.stage_ms["render"]
    assert checked_ms > MAX_GAP_S * 1000 / 2, attempt.stage_ms
    await sync_to_async(streaming.refresh_from_db)()
    assert streaming.status == Status.SUCCEEDED
    assert await sync_to_async(largest_gap_s)(streaming) < MAX_GAP_S


async def test_a_busy_shared_database_thread_loses_no_lease(make_task, settings):
    """Page reads, admin queries or a burst of clients can hold the shared database thread;
    the running attempt's lease renewals and chunk writes do not wait for it."""
    settings.REPORTS_LEASE_S = 1
    streams, clock = Streams(), Clock()
    worker = Supervisor(slots=1, clock=clock, provider=ScriptedProvider(streams, clock))
    task = await sync_to_async(make_task)()
    assert await worker.claim_and_start()
    await wait_until(lambda: deltas(task) >= 3, "the stream to flow")

    release = threading.Event()
    held = asyncio.ensure_future(lanes.on_shared_db(release.wait)(30))
    try:
        before = await elsewhere(lambda: deltas(task))
        # Another worker's reaper, as in the scale-out layout, looks all along.
        reaped = []
        held_since = time.monotonic()
        while time.monotonic() - held_since < 3 * settings.REPORTS_LEASE_S:
            reaped += await elsewhere(reap_expired_leases)
            await asyncio.sleep(0.1)
        assert not held.done()  # the shared thread was busy all along
        after = await elsewhere(lambda: deltas(task))
    finally:
        release.set()
        await held
    streams.stop()
    await worker.wait_for_attempts()

    assert reaped == []
    assert after - before >= 20  # text kept flowing: a word every 50 ms
    await sync_to_async(task.refresh_from_db)()
    assert task.status == Status.SUCCEEDED
    attempts = await sync_to_async(list)(Attempt.objects.filter(task=task))
    assert [a.status for a in attempts] == ["succeeded"]
    assert await sync_to_async(largest_gap_s)(task) < MAX_GAP_S


async def test_the_worker_lane_reaches_the_event_loop_to_broadcast(make_task):
    """What commits on the worker lane is broadcast on commit with `publish_sync`, which
    must hand it to the event loop that awaits the lane, where the task's feed is."""
    task = await sync_to_async(make_task)()
    seen = asyncio.Event()
    subscription = await follower.subscribe(task.pk, task.last_seq, seen.set)

    def commit_and_announce():
        broadcast.publish_sync([Event(task.pk, task.last_seq + 1, "delta", {"text": "hi"})])
        return threading.current_thread().name

    thread = await asyncio.wait_for(lanes.on_worker_lane(commit_and_announce)(), 5)
    await asyncio.wait_for(seen.wait(), 5)

    assert thread.startswith("reportline-worker-lane")
    assert [(e.seq, e.data["text"]) for e in subscription.take()] == [(task.last_seq + 1, "hi")]
    subscription.close()


def test_a_dropped_connection_does_not_kill_the_worker_lane(make_task):
    if connection.vendor != "postgresql":
        pytest.skip("the server drops a connection on PostgreSQL only")

    def backend_pid():
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    on_lane = async_to_sync(lanes.on_worker_lane(backend_pid))
    dropped = on_lane()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [dropped])

    answers = []
    for _ in range(2):  # the call on the dropped connection may fail; the lane lives on
        try:
            answers.append(on_lane())
        except Exception:
            answers.append(None)
    assert answers[-1] not in (None, dropped)


def test_in_a_reportworker_a_slow_document_neither_stops_another_stream_nor_its_lease(
    alice, make_task, spawn_worker
):
    """The scale-out layout: one reportworker process on PostgreSQL runs both tasks, and
    this test reaps expired leases meanwhile, as the other workers would."""
    if connection.vendor != "postgresql":
        pytest.skip("the scale-out layout runs on PostgreSQL")
    streaming = make_task()
    spawn_worker(
        slots=2,
        REPORTS_SIMULATED_TTFT_S="0",
        REPORTS_SIMULATED_TOKENS_PER_S="25",  # about ten seconds of text
        REPORTS_PARSE_TIMEOUT_S=str(PARSE_TIMEOUT_S),
        REPORTS_PARSE_MEMORY_MB=str(PARSE_MEMORY_MB),
    )
    document = slow_pdf()
    wait_for(lambda: deltas(streaming) >= 5, "the worker to stream")
    slow = submit_file(alice, "slow.pdf", document)
    reaped = []

    def slow_task_ended() -> bool:
        reaped.extend(reap_expired_leases())
        return Task.objects.filter(pk=slow.pk, finished_at__isnull=False).exists()

    wait_for(slow_task_ended, "the slow document's task to end")
    wait_for(
        lambda: Task.objects.filter(pk=streaming.pk, finished_at__isnull=False).exists(),
        "the stream to end",
    )

    slow.refresh_from_db()
    streaming.refresh_from_db()
    assert slow.worker_id == streaming.worker_id  # one process ran both
    assert (slow.status, slow.error_type) == ("failed", "invalid_input")
    # Stopped by its wall-clock limit, well past MAX_GAP_S: long enough that the stream
    # beside it would have shown it as a gap over MAX_GAP_S, had the parse held it up.
    assert (slow.finished_at - slow.claimed_at).total_seconds() >= 1.5 * MAX_GAP_S
    assert reaped == []
    assert streaming.status == Status.SUCCEEDED
    assert list(Attempt.objects.filter(task=streaming).values_list("status", flat=True)) == [
        "succeeded"
    ]
    assert largest_gap_s(streaming) < MAX_GAP_S
