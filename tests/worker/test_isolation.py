"""Nothing one attempt does holds up another's stream (docs/architecture.md, lanes of work).

A slow document, a report at the size cap being validated and rendered, or a shared
database thread held busy: another task's text keeps flowing and no live lease expires.
Real clock, real parses.

Each test measures its own yardstick, so that a loaded machine slows both sides alike:
the stream's largest gap between two delta events while it ran alone (the baseline).
While the slow work runs beside it, the stream keeps writing (several of its delta events
fall inside the slow work's span: by the events, whatever the machine's speed) and its
largest gap stays within a few baselines. Had the slow work held the event loop, the
stream would have written nothing during it, one gap as long as the whole span.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import threading
import time
from datetime import datetime

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.db import connection, connections
from django.utils import translation

from reports import events, submissions, threads
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

# The stream's largest gap beside the slow work may be this many times its largest gap
# alone, plus a margin for scheduling on a loaded two-core machine (measured there: 1 s
# beside 0.2 s alone); without the isolation the gap is the slow work itself, over 3 s.
GAP_FACTOR, GAP_MARGIN_S = 3, 0.75
BASELINE_DELTAS = 20  # delta events the stream writes alone before the slow work starts
OVERLAP_DELTAS = 3  # at least this many of them are written while the slow work runs
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
    # Numbered, so that it says something new on every line: not a loop to be stopped.
    line = "- **item {:06d}** with `code`, a [link](https://example.com/a) and *emphasis* _here_\n"
    return OPENING + "".join(
        line.format(n) for n in range((kb * 1024 - len(OPENING)) // len(line.format(0)))
    )


def submit_file(owner, name: str, data: bytes) -> Task:
    extension = name[name.rindex(".") :]
    submission = Submission((Upload(name, extension, data),), "", "ok", None)
    task, _ = submissions.submit(owner, submission)
    return task


def delta_times(task: Task) -> list[datetime]:
    """Return when each of the task's delta events was written, in order."""
    return list(
        TaskEvent.objects.filter(task=task, type=events.DELTA)
        .order_by("seq")
        .values_list("created_at", flat=True)
    )


def span_of(task: Task, status: str) -> tuple[datetime, datetime]:
    """Return when `task` moved to `status` and when it ended, by its events."""
    rows = TaskEvent.objects.filter(task=task).order_by("seq")
    started = next(
        e.created_at for e in rows if e.type == events.STATUS and e.data["status"] == status
    )
    ended = next(e.created_at for e in rows if e.type in events.TERMINAL_TYPES)
    return started, ended


def largest_gap_s(times: list[datetime]) -> float:
    return max((b - a).total_seconds() for a, b in itertools.pairwise(times))


def assert_flowed_beside(stream: Task, alone_until: datetime, span: tuple[datetime, datetime]):
    """Assert that `stream` kept writing through `span`, the slow work beside it: several
    of its delta events fall inside the span, and its largest gap across the span (from
    its last event before it to its first after it) stays within GAP_FACTOR times its
    largest gap while it ran alone, before `alone_until`, plus GAP_MARGIN_S."""
    times = delta_times(stream)
    alone = [t for t in times[1:] if t < alone_until]  # the first waited for the provider
    assert len(alone) >= BASELINE_DELTAS // 2, f"too short a baseline: {len(alone)} deltas"
    baseline_s = largest_gap_s(alone)
    start, end = span
    inside = [t for t in times if start <= t <= end]
    before = [t for t in times if t < start][-1:]
    after = [t for t in times if t > end][:1]
    assert len(inside) >= OVERLAP_DELTAS, (
        f"{len(inside)} delta events during {(end - start).total_seconds():.2f} s of slow work"
    )
    assert after, "the stream wrote nothing after the slow work"
    across_s = largest_gap_s([*before, *inside, *after])
    bound_s = GAP_FACTOR * baseline_s + GAP_MARGIN_S
    assert across_s < bound_s, f"gap {across_s:.2f} s beside, {baseline_s:.2f} s alone"


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
            for i in range(1200):  # a minute at most
                if self._stop.is_set():
                    break
                yield TextDelta(f"word{i} ")  # new words: one word repeated is a loop
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
    """Start `streaming` alone, then the task `make_other()` beside it in the same worker;
    wait for the other to end, then let the stream end. Return the other task."""
    assert await worker.claim_and_start()
    await wait_until(lambda: deltas(streaming) > BASELINE_DELTAS, "the first stream to flow")
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


async def test_a_call_on_the_shared_database_thread_leaves_the_callers_context_alone():
    # Left to asgiref, every variable of the call's context would be copied back into the
    # caller's, Django's Locals as new objects each time, and kept for as long as the
    # calling task lives: an idle page's, hours.
    marker = contextvars.ContextVar("marker", default="unset")

    def touch() -> str:
        marker.set("set on the thread")
        translation.deactivate_all()  # one of Django's Locals
        return marker.get()

    language = translation.get_language()
    assert await threads.on_shared_db(touch)() == "set on the thread"
    assert marker.get() == "unset"
    assert translation.get_language() == language is not None


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
    await sync_to_async(streaming.refresh_from_db)()
    assert streaming.status == Status.SUCCEEDED
    parse = await sync_to_async(span_of)(slow, Status.RUNNING)
    await sync_to_async(assert_flowed_beside)(streaming, slow.created_at, parse)


async def test_a_report_at_the_size_cap_being_checked_does_not_stop_another_stream(
    alice, make_task, settings
):
    settings.REPORTS_MAX_REPORT_KB = 400
    settings.REPORTS_MAX_OUTPUT_TOKENS = 100_000  # the output cap holds it at 600,000 chars
    streams, clock = Streams(big=big_report(395)), Clock()
    worker = Supervisor(slots=2, clock=clock, provider=ScriptedProvider(streams, clock))
    streaming = await sync_to_async(make_task)()

    big = await stream_beside(
        worker, streams, streaming, lambda: make_task(content="# Another\n\nplease.\n")
    )

    assert big.status == Status.SUCCEEDED
    await sync_to_async(streaming.refresh_from_db)()
    assert streaming.status == Status.SUCCEEDED
    # Checked and rendered while finalizing: on the event loop, a gap in every other stream.
    check = await sync_to_async(span_of)(big, Status.FINALIZING)
    await sync_to_async(assert_flowed_beside)(streaming, big.created_at, check)


async def test_a_busy_shared_database_thread_loses_no_lease(make_task, settings):
    """Page reads, admin queries or a burst of clients can hold the shared database thread;
    the running attempt's lease renewals and chunk writes do not wait for it."""
    settings.REPORTS_LEASE_S = 1
    streams, clock = Streams(), Clock()
    worker = Supervisor(slots=1, clock=clock, provider=ScriptedProvider(streams, clock))
    task = await sync_to_async(make_task)()
    assert await worker.claim_and_start()
    await wait_until(lambda: deltas(task) > BASELINE_DELTAS, "the stream to flow alone")

    release = threading.Event()
    held = asyncio.ensure_future(threads.on_shared_db(release.wait)(30))
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
    await wait_until(lambda: deltas(task) > after, "the stream to write after the slow work")
    streams.stop()
    await worker.wait_for_attempts()

    assert reaped == []
    await sync_to_async(task.refresh_from_db)()
    assert task.status == Status.SUCCEEDED
    attempts = await sync_to_async(list)(Attempt.objects.filter(task=task))
    assert [a.status for a in attempts] == ["succeeded"]
    # Text kept flowing while the thread was held (had the chunk writes waited for it,
    # none would have been written until its release).
    assert after - before >= OVERLAP_DELTAS
    times = await sync_to_async(delta_times)(task)
    while_held = (times[before - 1], times[after - 1])
    await sync_to_async(assert_flowed_beside)(task, while_held[0], while_held)


async def test_the_worker_lane_reaches_the_event_loop_to_broadcast(make_task):
    """What commits on the worker lane is broadcast on commit with `publish_sync`, which
    must hand it to the event loop that awaits the lane, where the task's feed is."""
    task = await sync_to_async(make_task)()
    seen = asyncio.Event()
    subscription = await follower.subscribe(task.pk, task.last_seq, seen.set)

    def commit_and_announce():
        broadcast.publish_sync([Event(task.pk, task.last_seq + 1, "delta", {"text": "hi"})])
        return threading.current_thread().name

    thread = await asyncio.wait_for(threads.on_worker_thread(commit_and_announce)(), 5)
    await asyncio.wait_for(seen.wait(), 5)

    assert thread.startswith("reportline-worker-thread")
    assert [(e.seq, e.data["text"]) for e in subscription.take()] == [(task.last_seq + 1, "hi")]
    subscription.close()


def test_a_dropped_connection_does_not_kill_the_worker_lane(make_task):
    if connection.vendor != "postgresql":
        pytest.skip("the server drops a connection on PostgreSQL only")

    def backend_pid():
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    on_lane = async_to_sync(threads.on_worker_thread(backend_pid))
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
    wait_for(lambda: deltas(streaming) > BASELINE_DELTAS, "the worker to stream alone")
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
    assert reaped == []
    assert streaming.status == Status.SUCCEEDED
    assert list(Attempt.objects.filter(task=streaming).values_list("status", flat=True)) == [
        "succeeded"
    ]
    assert_flowed_beside(streaming, slow.created_at, span_of(slow, Status.RUNNING))
