"""The event loop's lag and the database queue's wait: measured, exported, and a stall named."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reports import threads
from reports.observability import logs, loop_lag
from reports.observability.loop_lag import LoopMonitor

BLOCK_S = 0.3
TASK_ID, ATTEMPT_ID = str(uuid.uuid4()), str(uuid.uuid4())


class StallWarnings(logging.Handler):
    """Keep the stall warnings, and say when the first one was written."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.first = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "event_loop.stalled":
            self.records.append(record)
            self.first.set()


def hold_the_loop(warned: threading.Event) -> None:
    """Block the calling thread (the loop's) until the warning is out, then BLOCK_S more.

    Waiting for the watchdog makes the test independent of how busy the machine is: the
    stall always outlasts its detection, and lasts BLOCK_S at least after the watchdog's
    unanswered ask.
    """
    assert warned.wait(timeout=10), "the watchdog never warned"
    time.sleep(BLOCK_S)


async def stalled_attempt(warnings: StallWarnings) -> loop_lag.Stall:
    loop = asyncio.get_running_loop()
    monitor = LoopMonitor(loop, warn_s=0.1, interval_s=0.02).start()
    try:

        async def attempt() -> None:
            with logs.bound(task_id=TASK_ID, attempt_id=ATTEMPT_ID):
                hold_the_loop(warnings.first)

        await asyncio.create_task(attempt(), name=f"attempt-{ATTEMPT_ID}")
        stall = loop_lag.recent.stalls[-1]
        for _ in range(500):  # the watchdog hears the loop answer again
            if stall.held_ms is not None:
                break
            await asyncio.sleep(0.01)
        return stall
    finally:
        monitor.stop()


@pytest.fixture(scope="module")
def stall():
    """One attempt that held the loop for BLOCK_S and more: its warnings and its stall."""
    warnings = StallWarnings()
    logger = logging.getLogger(loop_lag.__name__)
    logger.addHandler(warnings)
    try:
        found = asyncio.run(stalled_attempt(warnings))
    finally:
        logger.removeHandler(warnings)
    return warnings.records, found


def test_a_blocked_loop_logs_one_warning_naming_the_attempt_and_where(stall):
    records, found = stall
    assert len(records) == 1
    fields = records[0].event_fields
    assert fields["asyncio_task"] == f"attempt-{ATTEMPT_ID}"
    assert (fields["task_id"], fields["attempt_id"]) == (TASK_ID, ATTEMPT_ID)
    assert any("in hold_the_loop" in frame for frame in fields["frames"])
    assert found.held_ms >= BLOCK_S * 1000
    assert max(loop_lag.recent.lag_ms) >= BLOCK_S * 1000


@pytest.mark.django_db
def test_the_lag_and_the_stall_show_on_metrics(stall, admin_client):
    response = admin_client.get("/metrics")
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    lag = {
        (s.name, s.labels.get("le")): s.value
        for s in families["reportline_event_loop_lag_seconds"].samples
    }
    slower_than_block = (
        lag["reportline_event_loop_lag_seconds_count", None]
        - lag["reportline_event_loop_lag_seconds_bucket", "0.25"]
    )
    assert slower_than_block >= 1
    assert families["reportline_event_loop_stalls"].samples[0].value >= 1
    assert "reportline_shared_db_wait_seconds" in families
    assert not any(
        ATTEMPT_ID in str(s.labels) for f in families.values() for s in f.samples
    )  # no ids as labels


@pytest.mark.django_db
def test_the_latency_page_shows_the_lag_and_who_held_the_loop(stall, admin_client):
    page = admin_client.get("/staff/latency/").content.decode()
    assert 'data-metric="Event loop lag"' in page
    assert 'data-metric="Database queue wait"' in page
    stalls = page[page.index("data-stalls") :]
    assert f"attempt-{ATTEMPT_ID}" in stalls and TASK_ID in stalls
    assert "hold_the_loop" in stalls


def test_a_call_queued_behind_a_busy_database_thread_records_its_wait():
    async def scenario() -> float:
        started, release = threading.Event(), threading.Event()

        def busy() -> None:
            started.set()
            release.wait(timeout=10)

        holder = asyncio.create_task(threads.on_shared_db(busy)())
        assert await asyncio.to_thread(started.wait, 10)
        loop_lag.recent.db_wait_ms.clear()  # a bounded window: earlier tests may have filled it
        queued = asyncio.create_task(threads.on_shared_db(lambda: None)())
        asyncio.get_running_loop().call_later(BLOCK_S, release.set)
        await asyncio.gather(holder, queued)
        return list(loop_lag.recent.db_wait_ms)

    waits = asyncio.run(scenario())
    # The wait runs from the call, taken a moment after the hold began: allow that moment.
    assert len(waits) == 1 and waits[0] >= (BLOCK_S - 0.05) * 1000
