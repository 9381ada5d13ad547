"""In-process wake-ups: a cancel reaches a runner, and a new task the supervisor, at once.

Listeners live on an event loop; `notify` may be called from any thread. A runner or
supervisor in another process learns the same things from the database instead (its
next lease renewal, its next poll).
"""

import asyncio
import threading
from collections.abc import Callable

NEW_TASK = "new-task"

_lock = threading.Lock()
_listeners: dict[str, tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = {}


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
