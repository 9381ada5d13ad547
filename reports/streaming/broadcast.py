"""Fan committed events out; the event table stays the truth.

The feeds of this process get them at once, handed over in memory; other processes get
them through the channel layer, which may drop messages (it is at-most-once), so a
failure there is logged and ignored: followers fill any gap from the database. An
in-process layer (the demo's) reaches no other process, so it is not used at all: going
through it only cost time (it scans every channel on every send) and memory per page.
"""

import asyncio
import logging
from collections.abc import Iterable

from asgiref.sync import SyncToAsync, async_to_sync

from reports.models import Event
from reports.streaming import follower

log = logging.getLogger(__name__)


async def publish(events: Iterable[Event]) -> None:
    """Fan events out: one layer message per task, carrying its events in order."""
    events = list(events)
    follower.hand_over(events)
    layer = follower.layer_across_processes()
    if layer is None:
        return
    by_task: dict[str, list[Event]] = {}
    for event in events:
        by_task.setdefault(str(event.task_id), []).append(event)
    for task_id, rows in by_task.items():
        message = {"type": "task.events", "events": [event.as_row() for event in rows]}
        try:
            await layer.group_send(follower.group_name(task_id), message)
        except Exception:
            log.warning("broadcast failed for task %s seq %s", task_id, rows[-1].seq)


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
