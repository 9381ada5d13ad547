"""The worker's own thread: a chunk write waits behind at most one of the other calls, and
the others still go on while writes keep coming."""

from __future__ import annotations

import threading

import pytest

from reports.threads import _WorkerThread


@pytest.fixture
def thread():
    return _WorkerThread("test-worker-thread")


def run_in_order(thread: _WorkerThread, first_lane, queued: list) -> list[str]:
    """Hold the thread in a call on `first_lane` while `queued` [(lane, name)] are
    submitted, then let it go; return the names in the order they ran."""
    ran, holding, release = [], threading.Event(), threading.Event()

    def first():
        holding.set()
        release.wait(5)
        ran.append("first")

    futures = [first_lane.submit(first)]
    assert holding.wait(5)
    for lane, name in queued:
        futures.append(lane.submit(ran.append, name))
    release.set()
    for future in futures:
        future.result(timeout=5)
    return ran


def test_a_chunk_write_waits_for_at_most_one_other_call(thread):
    ends = [(thread.other, f"end {n}") for n in range(1, 4)]
    order = run_in_order(thread, thread.other, [*ends, (thread.streaming, "write")])
    assert order == ["first", "write", "end 1", "end 2", "end 3"]


def test_the_other_calls_go_on_between_writes(thread):
    writes = [(thread.streaming, f"write {n}") for n in range(1, 4)]
    order = run_in_order(thread, thread.streaming, [*writes, (thread.other, "end")])
    assert order == ["first", "end", "write 1", "write 2", "write 3"]


def test_each_queue_keeps_its_order_and_a_failure_reaches_its_caller(thread):
    def fails():
        raise ValueError("refused")

    failing = thread.other.submit(fails)
    with pytest.raises(ValueError, match="refused"):
        failing.result(timeout=5)
    ran = []
    futures = [thread.other.submit(ran.append, n) for n in range(5)]
    for future in futures:
        future.result(timeout=5)
    assert ran == list(range(5))
