"""Fan committed events out; the event table stays the truth.

The feeds of this process get them at once, handed over in memory; other processes get
them through the channel layer, which may drop messages (it is at-most-once), so a
failure there is logged and ignored: followers fill any gap from the database. An
in-process layer (the demo's) reaches no other process, so it is not used at all: going
through it only cost time (it scans every channel on every send) and memory per page.
"""

import asyncio
import logging
import time
import weakref
from collections.abc import Iterable

from asgiref.sync import SyncToAsync, async_to_sync

from reports.models import Event
from reports.streaming import follower

log = logging.getLogger(__name__)


async def publish(events: Iterable[Event]) -> None:
    """Fan events out: one layer message per task, carrying its events in order.

    Return once the layer has them (or failed to take them): a caller that awaits each
    of its publishes in turn keeps its events in order for the other processes too.
    """
    events = list(events)
    follower.hand_over(events)
    layer = follower.layer_across_processes()
    if layer is None:
        return
    by_task: dict[str, list[Event]] = {}
    for event in events:
        by_task.setdefault(str(event.task_id), []).append(event)
    messages = [
        (
            follower.group_name(task_id),
            {"type": "task.events", "events": [event.as_row() for event in rows]},
        )
        for task_id, rows in by_task.items()
    ]
    await _outbox(layer).send(messages)


class Outbox:
    """A process's messages to the others, in the order they were given, and all those
    waiting sent together.

    Each running report fans its events out as they are committed; one `PUBLISH` each
    was one round trip each, one at a time on the layer's connection, and a worker's
    event loop spent a fifth of its time on them (benchmark 2, scale-out). Here the
    messages given while a send is under way wait for it and then go in one pipeline:
    as many round trips as sends, not messages, whatever the number of reports.
    """

    def __init__(self, layer) -> None:
        self.layer = layer
        self._waiting: list[tuple[list, asyncio.Future]] = []
        self._sending: asyncio.Task | None = None
        self._outage = Outage()

    async def send(self, messages: list[tuple[str, dict]]) -> None:
        given = asyncio.get_running_loop().create_future()
        self._waiting.append((messages, given))
        if self._sending is None or self._sending.done():
            self._sending = asyncio.create_task(self._send_waiting())
        await asyncio.shield(given)  # a caller that goes does not stop the others' send

    async def _send_waiting(self) -> None:
        while self._waiting:
            taken, self._waiting = self._waiting, []
            messages = [message for batch, _ in taken for message in batch]
            try:
                await send_all(self.layer, messages)
            except Exception:
                self._outage.failed(len(messages))
            else:
                self._outage.sent()
            finally:
                for _, given in taken:
                    if not given.done():
                        given.set_result(None)


class Outage:
    """The log of a channel layer that fails: its first failure with the traceback, then a
    line every `EVERY_S` counting what was dropped, and one when it works again. Each batch
    of every running report fails while Redis is down, and a traceback each was a few
    kilobytes ten times a second a report."""

    EVERY_S = 30.0

    def __init__(self) -> None:
        self.since: float | None = None
        self.dropped = 0  # messages, since the last line
        self.total = 0  # messages, since the outage began
        self.said_at = 0.0

    def failed(self, count: int) -> None:
        now = time.monotonic()
        self.dropped += count
        self.total += count
        if self.since is None:
            self.since = self.said_at = now
            log.warning(
                "broadcast of %d messages failed; followers in other processes read the "
                "database until the channel layer answers again",
                count,
                exc_info=True,
            )
            self.dropped = 0
        elif now - self.said_at >= self.EVERY_S:
            log.warning(
                "broadcast still failing after %.0f s: %d messages dropped in the last %.0f s",
                now - self.since,
                self.dropped,
                now - self.said_at,
            )
            self.said_at, self.dropped = now, 0

    def sent(self) -> None:
        if self.since is not None:
            log.warning(
                "broadcast works again after %.0f s; %d messages were dropped",
                time.monotonic() - self.since,
                self.total,
            )
            self.since, self.dropped, self.total = None, 0, 0


async def send_all(layer, messages: list[tuple[str, dict]]) -> None:
    """Send (group, message) pairs in order: over Redis in one pipeline per server."""
    by_shard = _by_redis_server(layer, messages) if _over_redis_pubsub(layer) else None
    if by_shard is None:
        for group, message in messages:
            await layer.group_send(group, message)
        return
    for shard, published in by_shard.items():
        async with shard._lock:
            shard._ensure_redis()
            async with shard._redis.pipeline(transaction=False) as pipe:
                for channel, data in published:
                    pipe.publish(channel, data)
                await pipe.execute()


def _by_redis_server(layer, messages: list[tuple[str, dict]]) -> dict | None:
    """Return the messages as the layer's own `group_send` would publish them, by the
    connection (shard) each goes through; None if this layer is not built as expected."""
    try:  # channels_redis 4's layer, a message at a time in its `group_send`
        per_loop = layer._get_layer()
        by_shard: dict = {}
        for group, message in messages:
            channel = per_loop._get_group_channel_name(group)
            published = (channel, layer.serialize(message))
            by_shard.setdefault(per_loop._get_shard(channel), []).append(published)
        return by_shard
    except AttributeError:
        log.warning("the Redis layer is not as expected: its messages go one at a time")
        return None


def _over_redis_pubsub(layer) -> bool:
    try:  # an optional dependency: the demo's layer is in memory
        from channels_redis.pubsub import RedisPubSubChannelLayer
    except ImportError:
        return False
    return isinstance(layer, RedisPubSubChannelLayer)


_outboxes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per event loop


def _outbox(layer) -> Outbox:
    loop = asyncio.get_running_loop()
    outbox = _outboxes.get(loop)
    if outbox is None or outbox.layer is not layer:  # a layer set up anew (tests do)
        outbox = _outboxes[loop] = Outbox(layer)
    return outbox


_sending: set = set()  # hand-offs under way, held until done


def publish_sync(events: Iterable[Event]) -> None:
    """Fan committed events out from a thread.

    In a thread that an event loop is waiting on (reports/threads.py), the send is
    handed to that loop and this returns at once: the worker thread goes on to its next
    write instead of waiting for a busy loop to get round to it. Anywhere else (a
    request's thread, a command) it sends and waits.
    """
    events = list(events)
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    if loop is not None and loop.is_running():
        sending = asyncio.run_coroutine_threadsafe(publish(events), loop)
        _sending.add(sending)
        sending.add_done_callback(_sending.discard)
        return
    async_to_sync(publish)(events)
