"""Follow a task's events in order, with no gap and no repeat, whatever the layer drops.

The event table is the truth and the channel layer only a wake-up. A process keeps one
`Feed` per followed task, shared by all of that task's pages and SSE clients: it joins
the task's group once, passes on a live message that is exactly its next event, and
sends anything else back to the table. One poller per process reads the table for every
feed, in one query for all of them, so a task whose worker runs in another
process is followed even when the configured layer cannot reach it, and a thousand idle
pages cost one query a poll, not a thousand.

A client `subscribe`s with its own cursor: it joins the feed first, then replays the
table after its cursor, and drops what the feed hands it twice. Subscribers hold no
asyncio task of their own: the feed puts events in their `pending` list and calls
their `on_ready`.

Every query here runs on the pages' read threads (`reports.threads.on_page_reads`), in a
context of its own: nothing of a request's context goes with it, nor comes back into a
feed that lives as long as its task is followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import weakref
from collections.abc import Callable
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db.models import Q

from reports import threads
from reports.models import TERMINAL, Event, Task, TaskEvent

# An idle feed re-reads the table after REPORTS_POLL_S, then twice as late each time,
# up to this many times REPORTS_POLL_S; any event brings it back. (Benchmark 6: 50 idle
# task pages at a steady 0.5 s poll cost 7.6% of the machine.)
IDLE_BACKOFF = 4
# Larger than any seq a task reaches (the events' seq is a 64-bit integer in the table).
PAST_EVERY_EVENT = 2**63 - 1
log = logging.getLogger(__name__)


def read_seq(raw: str) -> int | None:
    """Return the seq a client's resume point names, or None when it is not a non-negative
    integer in ASCII digits. One of thousands of digits (which int() refuses to read) is
    past every event, as any seq past a task's last is: it reads as PAST_EVERY_EVENT."""
    if not (raw.isascii() and raw.isdigit()):
        return None
    return int(raw) if len(raw.lstrip("0")) <= 18 else PAST_EVERY_EVENT


def group_name(task_id) -> str:
    return f"task-{task_id}"


def layer_across_processes():
    """Return the channel layer when it reaches other processes; None otherwise."""
    layer = get_channel_layer()
    return None if layer is None or isinstance(layer, InMemoryChannelLayer) else layer


def hand_over(events: list[Event]) -> None:
    """Give committed events to this process's feeds of their tasks, at once.

    On the calling loop directly; the hubs of other loops (a process may run more than
    one) get them on their own loop.
    """
    if not events or not _hubs:
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    for loop, found in list(_hubs.items()):
        if loop is running:
            found.hand_over(events)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(found.hand_over, events)


def events_after(task_id, after: int) -> tuple[list[Event], bool]:
    """Return the persisted events after seq `after`, and whether the task has ended.

    The status is read first: the terminal event commits with the terminal status, so
    when the task had ended before the events were read, they include its last event.
    (Read the other way round, a task that ends between the two reads looks ended with
    its last events missing, and the stream would close without its terminal event.)
    """
    ended = Task.objects.filter(pk=task_id, status__in=TERMINAL).exists()
    events = TaskEvent.objects.filter(task_id=task_id, seq__gt=after).as_events()
    return events, ended


def read_feeds(cursors: dict[str, int]) -> dict[str, tuple[list[Event], int | None]]:
    """Return, per task, its events after its cursor and its place in line (None when
    not queued): two queries for any number of tasks. Tasks whose last seq has not
    moved cost no event read at all."""
    rows = (
        Task.objects.filter(pk__in=list(cursors))
        .with_queue_position()
        .values_list("pk", "last_seq", "queue_place")
    )
    places = {str(pk): place for pk, _, place in rows}
    moved = [(str(pk), cursors[str(pk)]) for pk, last_seq, _ in rows if last_seq > cursors[str(pk)]]
    found: dict[str, list[Event]] = {task_id: [] for task_id in cursors}
    if moved:
        after = Q(pk__in=[])
        for task_id, seq in moved:
            after |= Q(task_id=task_id, seq__gt=seq)
        for event in TaskEvent.objects.filter(after).order_by("task_id", "seq").as_events():
            found[str(event.task_id)].append(event)
    return {task_id: (found[task_id], places.get(task_id)) for task_id in cursors}


async def off_request(fn: Callable, *args) -> Any:
    """Run `fn` on a page read thread from a context of no request (see above)."""
    call = threads.on_page_reads(fn)(*args)
    return await asyncio.get_running_loop().create_task(call, context=contextvars.Context())


class Subscription:
    """One client's place in a task's feed: its own cursor and the events it has yet to send."""

    def __init__(self, feed: Feed, after: int, on_ready: Callable[[], None]) -> None:
        self.feed = feed
        self.last_seq = after
        self.on_ready = on_ready
        self.pending: list[Event] = []
        self.finished = False  # the terminal event is in `pending` or was taken
        self.replaying = True  # what the feed hands over meanwhile waits in `early`
        self.early: list[Event] = []
        self.place: int | None = None  # the task's place in line, when queued

    def take(self) -> list[Event]:
        """Return the events ready to send, in order, and forget them."""
        events, self.pending = self.pending, []
        return events

    def offer(self, events: list[Event]) -> bool:
        """Queue the events after the cursor; return whether any was new."""
        if self.replaying:
            self.early.extend(events)
            return False
        fresh = False
        for event in events:
            if self.finished or event.seq <= self.last_seq:
                continue  # already sent, or after the end
            self.pending.append(event)
            self.last_seq = event.seq
            fresh = True
            if event.is_terminal:
                self.finished = True
        return fresh

    def close(self) -> None:
        self.feed.leave(self)


class Feed:
    """The one follower of a task in this process."""

    def __init__(self, hub: Hub, task_id: str) -> None:
        self.hub = hub
        self.task_id = task_id
        self.subscribers: set[Subscription] = set()
        self.last_seq: int | None = None  # None until the first read of the table
        self.place: int | None = None
        self.finished = False
        self.layer = layer_across_processes()
        self.channel: str | None = None
        self.listening: asyncio.Task | None = None
        self.ready = asyncio.Event()
        self.early: list[Event] = []  # handed over before the first read of the table

    async def start(self) -> None:
        if self.layer is not None:
            try:
                self.channel = await self.layer.new_channel()
                await self.layer.group_add(group_name(self.task_id), self.channel)
            except Exception:
                self._layer_failed()
        # Joined first, then read: whatever commits from now on reaches the feed.
        try:
            self.last_seq = await off_request(_last_seq, self.task_id)
        except BaseException:
            self.hub.drop(self)
            raise
        early, self.early = self.early, []
        self.offer(early)
        if self.channel is not None:
            self.listening = self.hub.spawn(self._listen())

    def _layer_failed(self) -> None:
        """Follow the table alone from now on: the layer is a wake-up, never the truth."""
        log.warning("channel layer unreachable; following task %s by polling", self.task_id)
        self.channel = None

    async def _listen(self) -> None:
        # It ends when the feed stops, by cancellation, even after the task's end: a
        # receive that is cancelled is how the layer lets go of the channel (Redis
        # publish/subscribe unsubscribes it then), and a listener that returned on its
        # own would leave the channel subscribed for the life of the process.
        while self.channel is not None:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._layer_failed()
                return
            self.offer([Event.from_row(self.task_id, row) for row in message.get("events", [])])

    def offer(self, events: list[Event]) -> None:
        """Pass on what follows on exactly from the last event; for a gap, read the table."""
        if self.last_seq is None:
            self.early.extend(events)  # passed on once the first read says where it is
            return
        fresh = [e for e in events if e.seq > self.last_seq]
        if not fresh:
            return  # already passed on
        if fresh[0].seq != self.last_seq + 1:
            self.hub.poll_soon()  # a gap: the table fills it
            return
        self.deliver(fresh)

    def deliver(self, events: list[Event]) -> None:
        events = [e for e in events if e.seq > self.last_seq]
        if not events:
            return
        self.last_seq = events[-1].seq
        self.finished = any(e.is_terminal for e in events)
        self.hub.wait_s = self.hub.poll_s
        for subscriber in list(self.subscribers):
            if subscriber.offer(events):
                subscriber.on_ready()

    def polled(self, events: list[Event], place: int | None) -> None:
        """Take what the poller read: new events, and the place in line when it moved."""
        self.deliver(events)
        if place != self.place:
            self.place = place
            for subscriber in list(self.subscribers):
                subscriber.place = place
                subscriber.on_ready()

    def leave(self, subscriber: Subscription) -> None:
        self.subscribers.discard(subscriber)
        if not self.subscribers:
            self.hub.drop(self)

    async def stop(self) -> None:
        if self.listening is not None:
            self.listening.cancel()
            await asyncio.gather(self.listening, return_exceptions=True)
        if self.channel is not None:
            with contextlib.suppress(Exception):  # an unreachable layer expires it anyway
                await self.layer.group_discard(group_name(self.task_id), self.channel)


def _last_seq(task_id) -> int:
    return Task.objects.filter(pk=task_id).values_list("last_seq", flat=True).first() or 0


class Hub:
    """The feeds of one event loop, and the one poller that reads the table for them."""

    def __init__(self) -> None:
        self.feeds: dict[str, Feed] = {}
        self.wait_s = self.poll_s  # until the next read of the table
        self.poller: asyncio.Task | None = None
        self.wake = asyncio.Event()
        self.tasks: set[asyncio.Task] = set()

    @property
    def poll_s(self) -> float:
        return settings.REPORTS_POLL_S

    def spawn(self, coro) -> asyncio.Task:
        """Start a task of the hub's own, outside any request's context."""
        task = asyncio.get_running_loop().create_task(coro, context=contextvars.Context())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def subscribe(
        self, task_id, after: int, on_ready: Callable[[], None] = lambda: None
    ) -> Subscription:
        """Follow the task from after `after`: joined first, then replayed from the table."""
        key = str(task_id)
        feed = self.feeds.get(key)
        if feed is None:
            feed = self.feeds[key] = Feed(self, key)
            try:
                await feed.start()
            finally:
                feed.ready.set()  # also when it failed: a later subscriber tries afresh
        else:
            await feed.ready.wait()
            if feed.last_seq is None:
                raise RuntimeError(f"the feed of task {key} could not start")
        subscriber = Subscription(feed, after, on_ready)
        subscriber.place = feed.place
        feed.subscribers.add(subscriber)
        try:
            stored, ended = await off_request(events_after, key, after)
        except BaseException:
            subscriber.close()
            raise
        subscriber.replaying = False
        subscriber.offer(stored)
        subscriber.offer(subscriber.early)  # what the feed passed on during the replay
        subscriber.early = []
        if ended:
            subscriber.finished = True  # a finished task has nothing more to send
        if self.poller is None or self.poller.done():
            self.poller = self.spawn(self._poll())
        return subscriber

    def hand_over(self, events: list[Event]) -> None:
        """Offer committed events to the feeds of their tasks (`hand_over` above)."""
        for event in events:
            feed = self.feeds.get(str(event.task_id))
            if feed is not None:
                feed.offer([event])

    def poll_soon(self) -> None:
        self.wake.set()

    def drop(self, feed: Feed) -> None:
        if self.feeds.get(feed.task_id) is feed:
            del self.feeds[feed.task_id]
        self.spawn(feed.stop())

    async def _poll(self) -> None:
        """Read the table for every live feed at once, less often while nothing moves."""
        while self.feeds:
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.wait_s)
            live = [f for f in self.feeds.values() if f.last_seq is not None and not f.finished]
            if not live:
                continue
            self.wait_s = min(self.wait_s * 2, self.poll_s * IDLE_BACKOFF)  # if nothing moved
            try:
                read = await off_request(read_feeds, {f.task_id: f.last_seq for f in live})
            except Exception:
                log.exception("reading the followed tasks failed; trying again")
                continue
            for feed in live:
                if feed.task_id in read:
                    feed.polled(*read[feed.task_id])


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = weakref.WeakKeyDictionary()


def hub() -> Hub:
    """Return this event loop's hub."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        found = _hubs[loop] = Hub()
    return found


async def subscribe(task_id, after: int, on_ready: Callable[[], None] = lambda: None):
    return await hub().subscribe(task_id, after, on_ready)
