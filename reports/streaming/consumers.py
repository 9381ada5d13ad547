"""The task page's live stream: `/ws/tasks/<task_id>/?after=<seq>` (docs/api.md).

Thin: it checks who is asking, follows the task's events with a `Follower` (replay
after `seq`, then live, gaps filled from the table) and renders them for the page.
It writes nothing. Events that are ready at once go out as one message; after the
terminal event the socket closes with 1000.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from urllib.parse import parse_qs

from channels.db import database_sync_to_async as db
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string
from django.utils.html import escape

from reports import presentation
from reports.models import TERMINAL, Event, Status, Task
from reports.streaming.follower import Follower

log = logging.getLogger(__name__)

TEMPLATE = "reports/task.html"
MAX_BATCH_EVENTS = 200  # a replay of a long report goes out in a few messages, not one
QUEUED_REFRESH_S = 2.0  # how often a queued task's place in line is re-read
# A socket that carries nothing for this long gets an empty batch: the page counts a
# silence over twice this as a dead connection (docs/pages.md: data-connection).
HEARTBEAT_S = 10.0
_END = object()


def resume_point(query_string: bytes) -> int | None:
    """Return the seq to resume after (0 when not given), or None when it is malformed."""
    values = parse_qs(query_string.decode("latin-1")).get("after", ["0"])
    raw = values[-1]
    return int(raw) if raw.isascii() and raw.isdigit() else None


class TaskConsumer(AsyncWebsocketConsumer):
    following: asyncio.Task | None = None
    shown_place: int | None = None  # the place in line last sent

    async def connect(self) -> None:
        after = resume_point(self.scope.get("query_string", b""))
        task_id = self.scope["url_route"]["kwargs"]["task_id"]
        task = None
        if after is not None:
            task = await db(Task.objects.owned)(self.scope.get("user"), task_id)
        if task is None:
            # Closing before accepting refuses the handshake: nothing is sent, and a
            # foreign, missing or malformed task looks exactly the same.
            await self.close()
            return
        await self.accept()
        self.following = asyncio.create_task(self.follow(task, after))

    async def disconnect(self, code: int) -> None:
        if self.following is not None:
            self.following.cancel()
            await asyncio.gather(self.following, return_exceptions=True)
            self.following = None

    async def follow(self, task: Task, after: int) -> None:
        """Send the task's events after `after` until its terminal event, then close."""
        queue: asyncio.Queue = asyncio.Queue()
        pump = asyncio.create_task(_pump(task.pk, after, queue))
        try:
            status_data = await db(presentation.last_status_data)(task, after)
            await self._send_batches(task, after, status_data, queue)
            await pump  # re-raises what ended the follower early, if anything did
            await self.close(code=1000)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("live stream of task %s failed", task.pk)
            await self.close(code=1011)  # the page reconnects and resumes
        finally:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)

    async def _send_batches(
        self, task: Task, last_seq: int, status_data: dict, queue: asyncio.Queue
    ) -> None:
        refreshed_at = sent_at = time.monotonic()
        while True:
            items = [await queue.get()]
            # Whatever else is ready now goes in the same message.
            while not queue.empty() and len(items) < MAX_BATCH_EVENTS:
                items.append(queue.get_nowait())
            events: list[Event] = [item for item in items if isinstance(item, Event)]
            if events:
                refreshed_at = time.monotonic()
                last_seq = events[-1].seq
                if all(event.type == "delta" for event in events):
                    # Text alone reads nothing: render it here, not in the one thread
                    # every consumer's database work queues for.
                    message, latest = live_message(task, events, last_seq)
                else:
                    message, latest = await db(live_message)(task, events, last_seq)
                status_data = latest or status_data
                await self.send(text_data=message)
                sent_at = time.monotonic()
            elif items[0] is None:
                stale = time.monotonic() - refreshed_at >= QUEUED_REFRESH_S
                if status_data.get("status") == Status.QUEUED and stale:
                    refreshed_at = time.monotonic()
                    await self._refresh_queued(task, status_data, last_seq)
                if time.monotonic() - sent_at >= HEARTBEAT_S:
                    await self.send(text_data=heartbeat(last_seq))
                    sent_at = time.monotonic()
            if items[-1] is _END or status_data.get("status") in TERMINAL:
                return

    async def _refresh_queued(self, task: Task, status_data: dict, last_seq: int) -> None:
        """Re-send a queued task's status line: its place in line moves with no event.

        Only when the place changed: rendering the line (with its wait estimate) for
        every idle page every 2 s was a quarter of an idle server's CPU (benchmark 6).
        """

        def render() -> str | None:
            if not presentation.still_queued(task):
                return None  # its next event is on the way and will say what happened
            place = task.queue_position()
            if place == self.shown_place:
                return None
            self.shown_place = place
            return status_refresh(task, status_data, last_seq)

        message = await db(render)()
        if message is not None:
            await self.send(text_data=message)


# --- messages: rendered in a worker thread (they read the database) -----------------


def live_message(task: Task, events: Sequence[Event], last_seq: int) -> tuple[str, dict | None]:
    """Render one WebSocket message: the events' text in order, then out-of-band swaps.

    The message opens with `<template data-batch data-seq=N>` (N: the seq of the last
    event it covers) holding one `<template data-delta>` per text event and one
    `<template data-attempt-start>` per attempt that started; the page appends those
    itself, batched per animation frame. After it come htmx out-of-band fragments: the
    status line when the status changed, and on a terminal event the outcome (report,
    download link, or why it is incomplete). Return the message and the data of the
    last status-bearing event among `events` (None when there is none).
    """
    items: list[str] = []
    latest_status: dict | None = None
    for event in events:
        number = int(event.data.get("attempt") or 0)
        if event.type == "delta":
            text = event.data.get("text", "")
            items.append(
                f'<template data-delta data-seq="{event.seq}" data-attempt="{number}">'
                f"{escape(text)}</template>"
            )
            continue
        latest_status = {**event.data, "status": presentation.status_of(event.type, event.data)}
        if latest_status["status"] == Status.RUNNING:
            items.append(
                f'<template data-attempt-start data-seq="{event.seq}" data-attempt="{number}">'
                "</template>"
            )
    parts = [f'<template data-batch data-seq="{last_seq}">{"".join(items)}</template>']
    if latest_status is not None:
        parts.append(status_fragment(task, latest_status))
        if latest_status["status"] in TERMINAL:
            task.refresh_from_db(
                fields=[
                    "report_html",
                    "cancel_requested_at",
                    "cost_status",
                    "reserved_micros",
                    "cost_micros",
                ]
            )
            parts.append(outcome_fragments(task, latest_status))
    return "".join(parts), latest_status


def status_fragment(task: Task, status_data: dict) -> str:
    status = presentation.status_context(task, status_data)
    return render_to_string(f"{TEMPLATE}#status", {"status": status, "oob": True})


def heartbeat(last_seq: int) -> str:
    """Render a message that carries no event: it only shows the connection is alive."""
    return f'<template data-batch data-seq="{last_seq}"></template>'


def status_refresh(task: Task, status_data: dict, last_seq: int) -> str:
    """Render a message that only refreshes the status line (a queued task's place)."""
    return heartbeat(last_seq) + status_fragment(task, status_data)


def outcome_fragments(task: Task, status_data: dict) -> str:
    context = {"task": task, "oob": True, **presentation.outcome_context(task, status_data)}
    return "".join(
        render_to_string(f"{TEMPLATE}#{name}", context)
        for name in ("actions", "incomplete", "report", "cost")
    )


async def _pump(task_id, after: int, queue: asyncio.Queue) -> None:
    """Put the task's events (and None when idle) on the queue, then _END."""
    try:
        async with Follower(task_id, after) as follower:
            async for event in follower.events():
                queue.put_nowait(event)
    finally:
        queue.put_nowait(_END)
