"""Follow a task's events in order, with no gap and no repeat, whatever the layer drops.

The event table is the truth and the channel layer only a wake-up: a follower joins
the task's group first, then reads persisted events after its cursor; a live message
that is exactly the next event is passed on as it is, anything else sends it back to
the table. With no message for a while it reads the table anyway, so a worker in
another process is followed even when the configured layer cannot reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async as db
from channels.layers import get_channel_layer
from django.conf import settings

from reports.models import TERMINAL, Event, Task, TaskEvent
from reports.streaming.broadcast import group_name

TERMINAL_EVENTS = frozenset(TERMINAL)
# An idle follower re-reads the table after REPORTS_POLL_S, then twice as late each time,
# up to this many times REPORTS_POLL_S; any event brings it back. (Benchmark 6: 50 idle
# task pages at a steady 0.5 s poll cost 7.6% of the machine.)
IDLE_BACKOFF = 4
log = logging.getLogger(__name__)


def events_after(task_id, after: int) -> tuple[list[Event], bool]:
    """Return the persisted events after seq `after`, and whether the task has ended.

    The status is read first: the terminal event commits with the terminal status, so
    when the task had ended before the events were read, they include its last event.
    (Read the other way round, a task that ends between the two reads looks ended with
    its last events missing, and the stream would close without its terminal event.)
    """
    ended = Task.objects.filter(pk=task_id, status__in=TERMINAL).exists()
    events = [e.as_event() for e in TaskEvent.objects.filter(task_id=task_id, seq__gt=after)]
    return events, ended


class Follower:
    """Yield a task's events after a cursor; yield None when idle (for keep-alives)."""

    def __init__(self, task_id, after: int, *, idle_s: float | None = None) -> None:
        self.task_id = task_id
        self.last_seq = after
        self.poll_s = idle_s if idle_s is not None else settings.REPORTS_POLL_S
        self.idle_s = self.poll_s  # how long the last idle wait was
        self._wait_s = self.poll_s
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self.finished = False

    async def __aenter__(self) -> Follower:
        if self.layer is not None:
            try:
                self.channel = await self.layer.new_channel()
                await self.layer.group_add(group_name(self.task_id), self.channel)
            except Exception:
                self._layer_failed()
        return self

    async def __aexit__(self, *exc) -> None:
        if self.channel is not None:
            with contextlib.suppress(Exception):  # an unreachable layer expires it anyway
                await self.layer.group_discard(group_name(self.task_id), self.channel)

    def _layer_failed(self) -> None:
        """Follow the table alone from now on: the layer is a wake-up, never the truth."""
        log.warning("channel layer unreachable; following task %s by polling", self.task_id)
        self.channel = None

    def _take(self, event: Event) -> Event:
        self.last_seq = event.seq
        self._wait_s = self.poll_s
        if event.type in TERMINAL_EVENTS:
            self.finished = True
        return event

    async def events(self) -> AsyncIterator[Event | None]:
        while not self.finished:
            stored, ended = await db(events_after)(self.task_id, self.last_seq)
            for event in stored:
                yield self._take(event)
                if self.finished:
                    return
            if ended:
                return  # a finished task with nothing left to send
            async for live in self._wait_live():
                yield live

    async def _wait_live(self) -> AsyncIterator[Event | None]:
        """Yield live events while they come in order; return to re-read the table."""
        while not self.finished:
            message = await self._receive()
            if message is None:
                yield None
                return
            if message["seq"] <= self.last_seq:
                continue  # already sent
            if message["seq"] != self.last_seq + 1:
                return  # a gap: the table fills it
            yield self._take(Event(self.task_id, message["seq"], message["event"], message["data"]))

    async def _receive(self) -> dict | None:
        self.idle_s = self._wait_s
        self._wait_s = min(self._wait_s * 2, self.poll_s * IDLE_BACKOFF)  # if this one idles
        if self.channel is None:
            await asyncio.sleep(self.idle_s)
            return None
        try:
            message = await asyncio.wait_for(self.layer.receive(self.channel), self.idle_s)
        except TimeoutError:
            return None
        except Exception:
            self._layer_failed()
            return None
        self._wait_s = self.poll_s
        return message
