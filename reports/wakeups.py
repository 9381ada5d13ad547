"""Wake idle workers in other processes when a task is queued: PostgreSQL LISTEN/NOTIFY.

Polling every `REPORTS_POLL_S` stays as the fallback (and is all SQLite has; there the
embedded worker is woken in-process by `reports.notify`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from django.db import connection, connections

CHANNEL = "reportline_tasks"
log = logging.getLogger(__name__)


def announce_new_task() -> None:
    """Inside the transaction that queues a task: listeners hear of it when it commits."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])


async def listen(wake: Callable[[], None], listening: Callable[[bool], None]) -> None:
    """Call `wake` on every announcement until cancelled; reconnect after failures.

    `listening(True)` is called once announcements are heard, `listening(False)` when
    the connection is lost.
    """
    if connections["default"].vendor != "postgresql":
        return
    import psycopg

    params = connections["default"].get_connection_params()
    conninfo = {
        k: params[k] for k in ("dbname", "user", "password", "host", "port") if params.get(k)
    }
    delay = 0.5
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(**conninfo, autocommit=True) as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                delay = 0.5
                listening(True)
                wake()  # anything queued while we were not listening
                async for _ in conn.notifies():
                    wake()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            listening(False)
            log.warning("LISTEN %s failed (%s); polling until it reconnects", CHANNEL, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
