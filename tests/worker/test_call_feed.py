"""The feed between a provider's stream and its runner: the core takes each item as it
arrives, and the runner is handed what it must act on, in order, and nothing else."""

from __future__ import annotations

import asyncio

import pytest

from reports.clock import FakeClock
from reports.providers.base import Completed, Heartbeat, TextDelta
from reports.states import Status
from reports.worker.attempt_core import CANCEL, FLUSH_INTERVAL_S, Call, End, Limits, Write
from reports.worker.call_feed import CallFeed
from reports.worker.retries import RetryPolicy


def call() -> Call:
    """A call sent at 0 with limits far off: only its writes fall due in these tests."""
    limits = Limits(
        deadline=600.0,
        response_timeout_s=60.0,
        stall_timeout_s=30.0,
        attempt=1,
        retries=RetryPolicy(max_attempts=3, max_wait_s=30, rerun_lost=True),
    )
    return Call(limits, sent_at=0.0)


async def settled() -> None:
    """Let every task that is ready run."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_text_that_only_waits_to_be_coalesced_does_not_wake_the_runner():
    async def scenario():
        clock = FakeClock(start=0.0)
        feed = CallFeed(call(), clock)
        feed.give(TextDelta("# Title\n\n"))  # the first text: written at once
        assert await feed.decisions() == [Write("# Title\n\n")]

        clock.advance(1.0)  # well past the first text's first moments
        runner = asyncio.ensure_future(feed.decisions())
        for word in ("one ", "two ", "three "):
            feed.give(TextDelta(word))
            feed.give(Heartbeat())  # the provider is still there: nothing to do
            clock.advance(FLUSH_INTERVAL_S / 4)
            await settled()
            assert not runner.done()

        clock.advance(FLUSH_INTERVAL_S)
        feed.give(TextDelta("four "))  # arrives once a write is due: all of it, in one
        await settled()
        assert runner.done()
        assert runner.result() == [Write("one two three four ")]
        feed.close()

    asyncio.run(scenario())


def test_a_stop_wakes_the_runner_at_once_and_what_came_before_it_is_written():
    async def scenario():
        clock = FakeClock(start=0.0)
        feed = CallFeed(core := call(), clock)
        feed.give(TextDelta("# Title\n\n"))
        await feed.decisions()
        clock.advance(1.0)
        feed.give(TextDelta("half a sentence"))
        runner = asyncio.ensure_future(feed.decisions())
        await settled()
        assert not runner.done()

        core.stop(CANCEL)
        feed.wake()
        await settled()
        write, end = runner.result()
        assert write == Write("half a sentence")
        assert isinstance(end, End) and end.outcome.status == Status.CANCELLED
        feed.give(Completed("stop"))  # what the stream still sends is not taken in
        assert core.outcome.status == Status.CANCELLED
        assert feed.ended
        feed.close()

    asyncio.run(scenario())


def test_the_first_answer_wakes_the_runner_even_without_text():
    async def scenario():
        feed = CallFeed(core := call(), FakeClock(start=0.0))
        runner = asyncio.ensure_future(feed.decisions())
        feed.give(Heartbeat(request_id="req_1"))  # a probe's attempt learns the provider is back
        await settled()
        assert runner.result() == []
        assert core.answered and core.request_id == "req_1"
        feed.close()

    asyncio.run(scenario())


LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio")]
try:
    import uvloop  # the production web server's loop (uvicorn[standard])

    LOOPS.append(pytest.param(uvloop.new_event_loop, id="uvloop"))
except ImportError:  # pragma: no cover - installed with uvicorn[standard] on Linux
    pass


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_write_due_within_the_millisecond_is_made_on_either_loop(loop_factory):
    # uvloop answers an instant less than half a millisecond ahead with a plain handle,
    # which has no `when`: the feed once read it there, and the stream's next delta
    # failed the attempt.
    async def scenario():
        clock = FakeClock(start=0.0)
        feed = CallFeed(call(), clock)
        feed.give(TextDelta("# Title\n\n"))
        await feed.decisions()
        clock.advance(1.0)
        runner = asyncio.ensure_future(feed.decisions())
        feed.give(TextDelta("one "))  # a write falls due in FLUSH_INTERVAL_S
        clock.advance(FLUSH_INTERVAL_S - 0.0003)
        feed.give(TextDelta("two "))  # the timer moves to within the millisecond
        feed.give(TextDelta("three "))
        await settled()
        assert not runner.done()
        clock.advance(0.001)  # the write is due: the timer's next ring makes it
        await asyncio.wait_for(runner, timeout=5)
        assert runner.result() == [Write("one two three ")]
        feed.close()

    asyncio.run(scenario(), loop_factory=loop_factory)
