"""One feed per task per process, shared by every page and stream that follows it; one
poller reads the table for all idle feeds; an idle feed polls less and less often."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async as db

from reports import events
from reports.models import Task
from reports.streaming import broadcast, follower
from reports.streaming.follower import IDLE_BACKOFF, hub, subscribe
from reports.worker.leases import claim_next_task

pytestmark = pytest.mark.django_db(transaction=True)

WAIT_S = 10.0  # only ever reached when a feed misbehaves


class Unreachable:
    """A channel layer whose server is down: the feeds must poll the table."""

    async def new_channel(self, prefix="specific."):
        raise ConnectionError("layer down")


async def until(predicate) -> None:
    """Wait (boundedly) for the poller, which offers nothing to await, to make it true."""
    async with asyncio.timeout(WAIT_S):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_every_follower_of_a_task_shares_one_feed_that_goes_when_the_last_leaves(
    make_task,
):
    task = await db(make_task)()
    followers = [await subscribe(task.pk, 0) for _ in range(30)]

    assert list(hub().feeds) == [str(task.pk)]
    assert {s.feed for s in followers} == {hub().feeds[str(task.pk)]}
    for subscription in followers:
        subscription.close()
    assert hub().feeds == {}


async def test_one_query_reads_every_idle_task_and_each_follower_gets_its_events_once(
    make_task, settings, monkeypatch
):
    settings.REPORTS_POLL_S = 0.02
    monkeypatch.setattr(follower, "get_channel_layer", Unreachable)
    reads: list[set[str]] = []
    read_feeds = follower.read_feeds

    def counted(cursors):
        # Counted once it returns: a read begun before the clear below may still
        # bring the new events, and it must be among those judged.
        found = read_feeds(cursors)
        reads.append(set(cursors))
        return found

    monkeypatch.setattr(follower, "read_feeds", counted)
    tasks = [await db(make_task)() for _ in range(4)]
    claims = [await db(claim_next_task)("w") for _ in tasks]  # seq 1 of each: running
    followers = [await subscribe(t.pk, 1) for t in tasks for _ in range(5)]
    await until(lambda: len(reads) >= 2)
    reads.clear()

    for claim in claims:
        await db(Task.objects.append_event)(claim.task_id, claim.epoch, events.delta("x"))
    await until(lambda: all(s.pending for s in followers))

    assert all([e.seq for e in s.take()] == [2] for s in followers)
    # The feeds poll together: each read covers every task, never one read per page.
    assert reads and all(read == {str(t.pk) for t in tasks} for read in reads)
    for subscription in followers:
        subscription.close()


async def test_idle_feeds_poll_less_and_less_often_and_an_event_resets_them(make_task, settings):
    settings.REPORTS_POLL_S = 0.01
    task = await db(make_task)()
    claim = await db(claim_next_task)("w")
    subscription = await subscribe(task.pk, 1)
    await until(lambda: hub().wait_s == 0.01 * IDLE_BACKOFF)

    event, _ = await db(Task.objects.append_event)(claim.task_id, claim.epoch, events.delta("x"))
    await broadcast.publish([event])
    await until(lambda: subscription.pending)

    assert hub().wait_s < 0.01 * IDLE_BACKOFF
    assert [e.seq for e in subscription.take()] == [2]
    subscription.close()
