"""Committed events fanned out to the other processes: each report's in order, and the
messages of many reports together, as many round trips as sends rather than messages."""

from __future__ import annotations

import asyncio
import logging
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


async def test_a_layer_down_is_logged_once_then_counted_not_once_a_batch(monkeypatch, caplog):
    # While Redis is down every batch of every running report fails: a traceback each was
    # kilobytes of log ten times a second a report.
    class Flaky:
        down = True

        async def group_send(self, group, message):
            if self.down:
                raise ConnectionError("Error 111 connecting to redis.internal:6379")

    layer = Flaky()
    monkeypatch.setattr(follower, "layer_across_processes", lambda: layer)
    task_id = uuid.uuid4()

    async def publish(seq: int) -> None:
        await broadcast.publish([Event(task_id, seq, "delta", {"text": "x", "attempt": 1})])

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == broadcast.log.name]

    with caplog.at_level(logging.INFO, logger=broadcast.log.name):
        for seq in range(1, 51):
            await publish(seq)
        [first] = said()
        assert first.startswith("broadcast of 1 messages failed")
        assert caplog.records[0].exc_info is not None  # the first says why
        monkeypatch.setattr(broadcast.Outage, "EVERY_S", 0.0)
        await publish(51)
        assert said()[1].startswith("broadcast still failing after ")
        assert said()[1].endswith(": 50 messages dropped in the last 0 s")
        layer.down = False
        await publish(52)
        await publish(53)
    assert said()[2:] == ["broadcast works again after 0 s; 51 messages were dropped"]
