"""An idle follower re-reads the table less and less often, and an event resets it."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async as db

from reports.models import Task
from reports.streaming import broadcast
from reports.streaming.follower import IDLE_BACKOFF, Follower
from reports.worker.leases import claim_next_task

pytestmark = pytest.mark.django_db(transaction=True)


async def test_idle_waits_double_up_to_a_cap_and_an_event_resets_them(make_task, settings):
    settings.REPORTS_POLL_S = 0.01
    task = await db(make_task)()
    claim = await db(claim_next_task)("w")
    after = (await db(Task.objects.get)(pk=task.pk)).last_seq
    waits = []
    async with Follower(task.pk, after) as follower:
        events = follower.events()
        for _ in range(5):
            assert await anext(events) is None
            waits.append(follower.idle_s)
        append = db(Task.objects.append_event)
        event, _ = await append(claim.task_id, claim.epoch, "delta", {"text": "x"})
        await broadcast.publish([event])
        assert (await anext(events)).seq == event.seq
        assert await anext(events) is None
        waits.append(follower.idle_s)
    assert waits == [0.01, 0.02, 0.04, 0.01 * IDLE_BACKOFF, 0.01 * IDLE_BACKOFF, 0.01]
