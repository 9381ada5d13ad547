"""The ways work leaves the event loop, each named for where it goes (docs/architecture.md).

The event loop only waits and routes. What blocks goes to one of these lanes, and the
name at the call site says which:

* `on_shared_db` — the process's one shared database thread (Django's thread-sensitive
  `sync_to_async`): short queries only, never a file, a parse or a wait on something slow.
* `in_blocking_pool` — a small bounded pool of threads for slow or CPU-bound work that
  touches no database: waiting for a sandboxed parse, validation, Markdown rendering,
  hashing, file and object-store I/O. Sized from the cores, so a burst of big documents
  cannot take the machine.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async

from reports.observability import loop_lag

BLOCKING_THREADS = max(2, min(8, (os.cpu_count() or 1) * 2))
_blocking = ThreadPoolExecutor(BLOCKING_THREADS, thread_name_prefix="reportline-blocking")


def on_shared_db[**P, R](fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run `fn` on the shared database thread: for short queries. Its wait is measured."""
    return loop_lag.measure_wait(fn, lambda started: sync_to_async(started, thread_sensitive=True))


def in_blocking_pool[**P, R](fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run `fn` in the bounded pool for slow work that touches no database."""
    return sync_to_async(fn, thread_sensitive=False, executor=_blocking)
