"""Fan committed events out on the channel layer; the event table stays the truth.

The layer may drop messages (it is at-most-once), so a failure here is logged and
ignored: followers fill any gap from the database.
"""

import logging
from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from reports.models import Event

log = logging.getLogger(__name__)


def group_name(task_id) -> str:
    return f"task-{task_id}"


async def publish(events: Iterable[Event]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for event in events:
        try:
            await layer.group_send(group_name(event.task_id), event.as_message())
        except Exception:
            log.warning("broadcast failed for task %s seq %s", event.task_id, event.seq)


def publish_sync(events: Iterable[Event]) -> None:
    async_to_sync(publish)(list(events))
