"""Committed events fanned out to the other processes: each report's in order, and the
messages of many reports together, as many round trips as sends rather than messages."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from redis.asyncio.client import Pipeline, Redis

from reports.events import Event
from reports.streaming import broadcast, follower

pytestmark = pytest.mark.django_db(transaction=True)

REPORTS, EVENTS = 20, 5


async def test_many_reports_events_reach_other_processes_in_order_in_few_round_trips(
    private_redis, monkeypatch
):
    layer = follower.layer_across_processes()
    tasks = [uuid.uuid4() for _ in range(REPORTS)]
    channels = {}
    for task_id in tasks:  # another process's page following each report
        channels[task_id] = await layer.new_channel()
        await layer.group_add(follower.group_name(task_id), channels[task_id])

    round_trips: list[int] = []  # the messages each one carried
    execute = Pipeline.execute

    async def counted(self, *args, **kwargs):
        round_trips.append(len(self.command_stack))
        return await execute(self, *args, **kwargs)

    alone: list = []
    execute_command = Redis.execute_command

    async def one_command(self, *args, **kwargs):
        if args and args[0] == "PUBLISH":
            alone.append(args[1])
        return await execute_command(self, *args, **kwargs)

    monkeypatch.setattr(Pipeline, "execute", counted)
    monkeypatch.setattr(Redis, "execute_command", one_command)

    async def report(task_id) -> None:  # as a running report does: a publish at a time
        for seq in range(1, EVENTS + 1):
            delta = Event(task_id, seq, "delta", {"text": f"{seq} ", "attempt": 1})
            await broadcast.publish([delta])

    await asyncio.gather(*(report(task_id) for task_id in tasks))

    for task_id in tasks:
        seen: list[int] = []
        while len(seen) < EVENTS:
            async with asyncio.timeout(10):
                message = await layer.receive(channels[task_id])
            seen += [seq for seq, _, _ in message["events"]]
        assert seen == list(range(1, EVENTS + 1))
    assert alone == []
    assert sum(round_trips) == REPORTS * EVENTS
    assert len(round_trips) <= 2 * EVENTS  # one a message would be a hundred


async def test_a_layer_that_fails_loses_the_messages_not_the_reports(monkeypatch):
    class Down:
        async def group_send(self, group, message):
            raise ConnectionError("layer down")

    monkeypatch.setattr(follower, "layer_across_processes", Down)
    task_id = uuid.uuid4()
    for seq in (1, 2):  # each returns: the table still holds them for the followers
        await broadcast.publish([Event(task_id, seq, "delta", {"text": "x", "attempt": 1})])
