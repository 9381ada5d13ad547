"""The ways work leaves the event loop, each named for where it goes (docs/architecture.md).

The event loop only waits and routes. What blocks goes to one of these threads, and the
name at the call site says which:

* `on_shared_db` — the process's one shared database thread (Django's thread-sensitive
  `sync_to_async`): short queries only, never a file, a parse or a wait on something slow.
* `on_worker_thread` — one thread of the worker's own, with its own database connection:
  lease renewals, chunk writes and the end of an attempt. What keeps running attempts
  alive and their text flowing never queues behind page reads, admin queries or a slow
  call on the shared thread.
* `in_blocking_pool` — a small bounded pool of threads for slow or CPU-bound work that
  touches no database: waiting for a sandboxed parse, validation, Markdown rendering,
  hashing, file and object-store I/O. Sized from the cores, so a burst of big documents
  cannot take the machine.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import SyncToAsync, sync_to_async
from django.db import close_old_connections

from reports.observability import loop_lag

BLOCKING_THREADS = max(2, min(8, (os.cpu_count() or 1) * 2))
_blocking = ThreadPoolExecutor(BLOCKING_THREADS, thread_name_prefix="reportline-blocking")

# One thread, so its connection is one (Django's connections are per thread) and its
# writes keep the order they were called in.
_worker_thread = ThreadPoolExecutor(1, thread_name_prefix="reportline-worker-thread")
CONNECTION_CHECK_S = 5.0  # how often the thread's connection is checked for age and health
_checked_at = float("-inf")  # when it last was; read and written by the worker thread only


# How long a thread may hold the interpreter while another waits for it. Python's 5 ms
# default lets a busy event loop keep a thread waiting 5 ms after each database
# reply (a chunk write is a handful of them); 1 ms gives the reply back to its thread
# almost at once, for a little more switching (docs/benchmarks.md, "the write path").
SWITCH_INTERVAL_S = 0.001


def shorten_switch_interval() -> None:
    """Let a thread back onto the interpreter soon after its call returns."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def on_shared_db[**P, R](fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run `fn` on the shared database thread: for short queries. Its wait is measured."""
    return loop_lag.measure_wait(fn, lambda started: sync_to_async(started, thread_sensitive=True))


def on_worker_thread[**P, R](fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run `fn` on the worker's own thread and connection: lease and chunk writes.

    `async_to_sync` inside `fn` still reaches the event loop that awaits it (asgiref's
    SyncToAsync records it for its threads), so what `fn` broadcasts on commit goes out.
    """
    return SyncToAsync(_keeping_connection(fn), thread_sensitive=False, executor=_worker_thread)


def in_blocking_pool[**P, R](fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run `fn` in the bounded pool for slow work that touches no database."""
    return sync_to_async(fn, thread_sensitive=False, executor=_blocking)


def _keeping_connection[**P, R](fn: Callable[P, R]) -> Callable[P, R]:
    """Wrap `fn` so the thread's long-lived connection stays usable.

    What request signals do for the web's connections: a connection past CONN_MAX_AGE
    is replaced, and one that failed is checked and dropped, so a connection the server
    closed costs one failed call, never the thread. Checked every few seconds rather
    than per call: a health check is a round trip of its own.
    """

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        global _checked_at
        now = time.monotonic()
        if now - _checked_at >= CONNECTION_CHECK_S:
            _checked_at = now
            close_old_connections()
        try:
            return fn(*args, **kwargs)
        except Exception:
            close_old_connections()
            raise

    return call
