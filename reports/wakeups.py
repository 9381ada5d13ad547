"""Wake-ups: a cancel reaches its runner, and a new task an idle supervisor, at once.

In one process, `notify` calls the listener a runner or supervisor `subscribe`d on its
event loop (from any thread). Across processes on PostgreSQL, `announce_new_task`
sends a NOTIFY that `listen` hears; polling every `REPORTS_POLL_S` stays the fallback
(and is all SQLite has). A runner in another process learns of a cancel at its next
lease renewal instead.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from django.conf import settings
from django.db import connection, connections

NEW_TASK = "new-task"
CHANNEL = "reportline_tasks"
log = logging.getLogger(__name__)

_lock = threading.Lock()
_listeners: dict[str, tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = {}


# --- in this process ----------------------------------------------------------------------


def subscribe(key, callback: Callable[[], None]) -> None:
    """Call `callback` on the running loop whenever `key` is notified."""
    with _lock:
        _listeners[str(key)] = (asyncio.get_running_loop(), callback)


def unsubscribe(key) -> None:
    with _lock:
        _listeners.pop(str(key), None)


def notify(key) -> None:
    with _lock:
        found = _listeners.get(str(key))
    if found is not None:
        loop, callback = found
        if not loop.is_closed():
            loop.call_soon_threadsafe(callback)


# --- across processes (PostgreSQL LISTEN/NOTIFY) -------------------------------------------


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

    conninfo = _listen_conninfo()
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


def _listen_conninfo() -> dict:
    """Return how to reach PostgreSQL for a session that LISTENs: REPORTS_LISTEN_DATABASE_URL
    when set (behind a transaction pooler it must bypass the pooler), else the database's."""
    if settings.REPORTS_LISTEN_DATABASE_URL:
        import dj_database_url

        url = dj_database_url.parse(settings.REPORTS_LISTEN_DATABASE_URL)
        params = {
            "dbname": url["NAME"],
            "user": url["USER"],
            "password": url["PASSWORD"],
            "host": url["HOST"],
            "port": url["PORT"],
        }
    else:
        params = connections["default"].get_connection_params()
    return {k: params[k] for k in ("dbname", "user", "password", "host", "port") if params.get(k)}
