"""The task page's live stream: `/ws/tasks/<task_id>/?after=<seq>` (docs/api.md).

Thin: it checks who is asking, subscribes to the task's shared feed (replay after
`seq`, then live, gaps filled from the table: `reports.streaming.follower`) and renders
what the feed hands over for the page. It writes nothing and runs nothing while the page
is idle. It folds the events it sends (`reports.events.fold`): the text of events that
are ready at once goes out as one message, already as a reader sees it, and a status
change's lines (which read the task) in one after it; after the terminal event the socket
closes with 1000. While it is open, the session that opened it is checked again, with
every other open stream's credential (`reports.streaming.credentials`); once it has ended,
the socket closes with SIGNED_OUT.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Sequence
from urllib.parse import parse_qs

from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string
from django.utils.html import escape

from reports import presentation, threads
from reports.events import Event, TaskState, fold
from reports.models import Status, Task
from reports.streaming import credentials, follower, limits

log = logging.getLogger(__name__)

TEMPLATE = "reports/task.html"
MAX_BATCH_EVENTS = 200  # a replay of a long report goes out in a few messages, not one
# A socket that carries nothing for this long gets an empty batch: the page counts a
# silence of two and a half of them as a dead connection (docs/pages.md: data-connection).
HEARTBEAT_S = 10.0
# A queued page's place in line is re-sent at most this often: while a queue drains,
# every claim moves every waiting page, and each refresh renders its line and wait
# estimate on a database thread (benchmark 2: a quarter of the one shared thread it had).
PLACE_REFRESH_S = 2.0
# The close code of a page whose session ended while it was open (a logout in another tab,
# a password change, sessions deleted): the page stops reconnecting and says so. 4401, as
# HTTP's 401: daphne sends only 1000 and 3000-4999 from an application.
SIGNED_OUT = 4401


def resume_point(query_string: bytes) -> int | None:
    """Return the seq to resume after (0 when not given), or None when it is malformed."""
    values = parse_qs(query_string.decode("latin-1")).get("after", ["0"])
    return follower.read_seq(values[-1])


class TaskConsumer(AsyncWebsocketConsumer):
    # No channel of its own: the task's shared feed follows the layer for every page,
    # so a layer whose server goes away closes no page (the feed polls the table).
    channel_layer_alias = None
    subscription: follower.Subscription | None = None
    slot: limits.StreamSlot | None = None
    sending: asyncio.Task | None = None  # only while there is something to send
    shown_place: int | None = None  # the place in line last sent
    place_sent_at = float("-inf")  # when (monotonic)
    place_due: asyncio.TimerHandle | None = None  # a refresh held back until then
    sent_at = 0.0  # when this socket last carried a message (monotonic)
    credential: credentials.SessionCredential | None = None  # what opened it, while open

    async def connect(self) -> None:
        after = resume_point(self.scope.get("query_string", b""))
        task_id = self.scope["url_route"]["kwargs"]["task_id"]
        user = self.scope.pop("user", None)  # needed only here: an idle page keeps no row
        session_key = self.scope.pop("session_key", None)
        task = None
        if after is not None:
            task = await threads.on_page_reads(Task.objects.owned)(user, task_id)
        if task is not None:
            self.slot = limits.take_slot(user)
        if self.slot is None:
            # Closing before accepting refuses the handshake: nothing is sent, and a
            # foreign, missing or malformed task looks exactly the same (as does a user
            # over the cap of open streams).
            await self.close()
            return
        await self.accept()
        # No event past the task's last one exists yet: a cursor beyond it would skip the
        # task's end and keep the socket (and its slot) open. Resume from the last one.
        after = min(after, task.last_seq)
        # Only the id is kept: an idle page holds no row (benchmark 6), and a status line
        # reads the task as it is then, not as it was when the page connected.
        self.task_id, self.last_seq = task.pk, after
        self.state = await threads.on_page_reads(presentation.status_at)(task, after)
        self.subscription = await follower.subscribe(task.pk, after, self._wake)
        self.sent_at = time.monotonic()
        self.credential = credentials.SessionCredential(session_key, user.pk)
        _heartbeats.watch(self)  # which the credentials' check reads its pages from
        credentials.watch()
        self._wake()

    async def disconnect(self, code: int) -> None:
        await self._stop()

    async def credential_ended(self) -> None:
        """The session that opened this socket ended: send nothing more, and close."""
        await self._stop()
        await self.close(code=SIGNED_OUT)

    async def _stop(self) -> None:
        """Stop following the task and give back what the socket holds (again: nothing)."""
        self.credential = None  # no longer checked
        if self.subscription is not None:
            self.subscription.close()
            self.subscription = None
        sending, self.sending = self.sending, None
        if sending is not None and sending is not asyncio.current_task():
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
        if self.slot is not None:
            self.slot.release()
        if self.place_due is not None:
            self.place_due.cancel()
            self.place_due = None
        _heartbeats.consumers.discard(self)

    def _wake(self) -> None:
        """Start sending what the feed handed over, unless a send is under way."""
        if self.subscription is not None and (self.sending is None or self.sending.done()):
            self.sending = asyncio.create_task(self._send_ready())

    async def _send_ready(self) -> None:
        """Send the events that are ready (in few messages), then close after the end."""
        subscription = self.subscription
        try:
            while subscription is self.subscription:
                events = subscription.take()
                for start in range(0, len(events), MAX_BATCH_EVENTS):
                    await self._send_events(events[start : start + MAX_BATCH_EVENTS])
                if not events:
                    await self._refresh_place(subscription.place)
                if subscription.finished and not subscription.pending:
                    await self.close(code=1000)
                    return
                if not subscription.pending:
                    return
        except asyncio.CancelledError:
            raise
        except OSError:
            # The page went while a message was on its way (a closed tab, a reload):
            # the server's disconnect follows and cleans up. Nothing failed.
            log.debug("page of task %s went during a send", self.task_id)
        except Exception:
            log.exception("live stream of task %s failed", self.task_id)
            await self.close(code=1011)  # the page reconnects and resumes
        finally:
            # A send that is over leaves nothing behind: an idle page keeps no finished
            # task and its coroutine (half a kilobyte, benchmark 6).
            if self.sending is asyncio.current_task():
                self.sending = None

    async def _send_events(self, events: list[Event]) -> None:
        """Send the events' text at once, then, when the status or a plan's progress
        changed, its lines.

        The text reads nothing, so it is rendered here and goes out without waiting for
        the threads every consumer's database reads queue for (`threads.on_page_reads`);
        only the status and outcome lines (which read the task) wait for one, in a
        message of their own.
        """
        announced = self.state.status_seq, self.state.progress
        self.state = fold(events, self.state)
        self.last_seq = events[-1].seq
        await self._send(text_message(events, self.last_seq))
        if (self.state.status_seq, self.state.progress) != announced:
            message = await threads.on_page_reads(status_message)(
                self.task_id, self.state, self.last_seq
            )
            await self._send(message)

    async def _send(self, message: str) -> None:
        self.sent_at = time.monotonic()
        await self.send(text_data=message)

    async def beat(self) -> None:
        """Say the connection is alive when nothing else was sent for HEARTBEAT_S."""
        if self.subscription is not None and time.monotonic() - self.sent_at >= HEARTBEAT_S:
            await self._send(heartbeat(self.last_seq))

    async def _refresh_place(self, place: int | None) -> None:
        """Re-send a queued task's status line: its place in line moves with no event.

        Only when the place changed (the feed reads it for all of a task's pages at
        once), and at most every PLACE_REFRESH_S: rendering the line (with its wait
        estimate) for every idle page every 2 s was a quarter of an idle server's CPU
        (benchmark 6). A change that comes sooner is sent when that time is up.
        """
        if place is None or place == self.shown_place:
            return
        if self.state.status != Status.QUEUED:
            return
        wait_s = self.place_sent_at + PLACE_REFRESH_S - time.monotonic()
        if wait_s > 0:
            if self.place_due is None:
                self.place_due = asyncio.get_running_loop().call_later(wait_s, self._place_due)
            return
        self.shown_place, self.place_sent_at = place, time.monotonic()
        message = await threads.on_page_reads(status_message)(
            self.task_id, self.state, self.last_seq, place=place
        )
        await self._send(message)

    def _place_due(self) -> None:
        self.place_due = None
        self._wake()


class _Heartbeats:
    """One ticker per process for every open page, not a task per page: each socket
    that was silent for HEARTBEAT_S gets an empty batch."""

    def __init__(self) -> None:
        self.consumers: weakref.WeakSet[TaskConsumer] = weakref.WeakSet()
        self.ticker: asyncio.Task | None = None

    def watch(self, consumer: TaskConsumer) -> None:
        self.consumers.add(consumer)
        if self.ticker is None or self.ticker.done():
            self.ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while self.consumers:
            await asyncio.sleep(HEARTBEAT_S / 4)
            for consumer in list(self.consumers):
                try:
                    await consumer.beat()
                except Exception:  # a socket closing meanwhile: its disconnect cleans up
                    self.consumers.discard(consumer)


_heartbeats = _Heartbeats()
# The credentials' check reads the open pages from the heartbeats' set (one set a page).
credentials.add_source(lambda: list(_heartbeats.consumers))


# --- messages -------------------------------------------------------------------------


def text_message(events: Sequence[Event], last_seq: int) -> str:
    """Render the events' text as one WebSocket message; read nothing.

    The message is `<template data-batch data-seq=N>` (N: the seq of the last event it
    covers) holding one `<template data-delta>` per text event, its text as a reader
    sees it, and one `<template data-attempt-start>` per attempt that started; the page
    appends those itself, batched per animation frame. A status the events announce
    follows in a `status_message`.
    """
    items: list[str] = []
    for event in events:
        if event.is_delta:
            items.append(
                f'<template data-delta data-seq="{event.seq}" data-attempt="{event.attempt}">'
                f"{escape(presentation.readable(event.text))}</template>"
            )
        elif event.starts_attempt:
            items.append(
                f'<template data-attempt-start data-seq="{event.seq}" '
                f'data-attempt="{event.attempt}"></template>'
            )
    return f'<template data-batch data-seq="{last_seq}">{"".join(items)}</template>'


def status_message(task_id, state: TaskState, last_seq: int, place: int | None = None) -> str:
    """Render the htmx out-of-band lines of a status change (they read the task): the
    status line, and on a terminal event the outcome (report, download link, or why it
    is incomplete).

    A queued task's place in line is the feed's `place` when it has one, else read now.
    A line sent because the place moved (`place` given) takes what every queued task of
    the lane reads alike from answers up to a second old (`presentation.HELD`).
    """
    task = Task.objects.by_id(task_id)
    if state.status == Status.QUEUED:
        task.queue_place = place if place is not None else task.read_queue_position()
    queue_reads = presentation.FRESH if place is None else presentation.HELD
    parts = [heartbeat(last_seq), status_fragment(task, state, queue_reads)]
    if state.ended:
        parts.append(outcome_fragments(task, state))
    elif (task.plan or {}).get("parts"):
        # A page opened before the plan was made learns of it with its first progress (a
        # plan of one call has no notice: nothing to render).
        parts.append(plan_fragment(task, state))
    return "".join(parts)


def status_fragment(task: Task, state: TaskState, queue_reads: presentation.QueueReads) -> str:
    status = presentation.status_context(task, state, queue_reads=queue_reads)
    return render_to_string(f"{TEMPLATE}#status", {"status": status, "oob": True})


def plan_fragment(task: Task, state: TaskState) -> str:
    notice = presentation.plan_notice(task, state)
    return render_to_string(f"{TEMPLATE}#plan", {"plan_notice": notice, "oob": True})


def heartbeat(last_seq: int) -> str:
    """Render a message that carries no event: it only shows the connection is alive."""
    return f'<template data-batch data-seq="{last_seq}"></template>'


def outcome_fragments(task: Task, state: TaskState) -> str:
    """Render the out-of-band parts a page replaces as its task ends, in one pass."""
    context = {"task": task, "oob": True, **presentation.outcome_context(task, state)}
    return render_to_string(f"{TEMPLATE}#outcome", context)
