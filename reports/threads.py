"""The ways work leaves the event loop, each named for where it goes (docs/architecture.md).

The event loop only waits and routes. What blocks goes to one of these threads, and the
name at the call site says which:

* `on_shared_db` — the process's one shared database thread (Django's thread-sensitive
  `sync_to_async`): short queries only, never a file, a parse or a wait on something slow.
* `on_page_reads` — a few threads for the short reads of open pages and event streams (a
  handshake's session and task, status lines, the feeds' table reads, the streams'
  credentials): reads only, side by side, each call giving its connection back as a
  request does. On the one shared thread, every page of a process queued for it: with
  500 and more streams on PostgreSQL, for seconds (docs/capacity.md).
* `on_worker_thread` — one thread of the worker's own, with its own database connection:
  lease renewals, chunk writes and the end of an attempt. What keeps running attempts
  alive and their text flowing never queues behind page reads, admin queries or a slow
  call on the shared thread; and, called with `streaming=True`, never behind more than
  one of the worker's other calls either (`_WorkerThread`).
* `in_blocking_pool` — a small bounded pool of threads for slow or CPU-bound work that
  touches no database: waiting for a sandboxed parse, validation, Markdown rendering,
  hashing, file and object-store I/O. Sized from the cores, so a burst of big documents
  cannot take the machine.
"""

from __future__ import annotations

import contextvars
import functools
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor

from asgiref.sync import SyncToAsync, sync_to_async
from django.conf import settings
from django.db import close_old_connections

from reports.observability import loop_lag

BLOCKING_THREADS = max(2, min(8, (os.cpu_count() or 1) * 2))
_blocking = ThreadPoolExecutor(BLOCKING_THREADS, thread_name_prefix="reportline-blocking")


class _WorkerThread:
    """One thread, so its connection is one (Django's connections are per thread), that
    serves two queues, each in the order it was called in: the streaming calls (chunk
    writes, lease renewals) and the others (an attempt's start and end, the circuit's
    bookkeeping). While both have calls waiting it takes one from each in turn.

    As the reports of a busy worker end together, their ends (a transaction of a dozen
    statements each) came in a burst; in one queue, every chunk write of every running
    attempt waited behind all of them, and the text of the others stalled on the page
    (docs/benchmarks.md, "The end of the reports"). Now a chunk write waits for at most
    one of them, and they still go on, one between two writes.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._ready = threading.Condition()
        self._queues: tuple[deque, deque] = (deque(), deque())  # streaming, other
        self._other_last = False  # the last call taken was from the other queue
        self._thread: threading.Thread | None = None
        self.streaming = _Lane(self, 0)
        self.other = _Lane(self, 1)

    def submit(self, lane: int, fn: Callable, args, kwargs) -> Future:
        future: Future = Future()
        with self._ready:
            self._queues[lane].append((future, fn, args, kwargs))
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name)
                self._thread.start()
            self._ready.notify()
        return future

    def _next(self):
        """Take the next call, or None once the interpreter is ending with none left."""
        streaming, other = self._queues
        with self._ready:
            while not (streaming or other):
                if not threading.main_thread().is_alive():
                    self._thread = None
                    return None
                self._ready.wait(timeout=1.0)
            self._other_last = bool(other) and (not streaming or not self._other_last)
            return (other if self._other_last else streaming).popleft()

    def _serve(self) -> None:
        while (call := self._next()) is not None:
            future, fn, args, kwargs = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)


class _Lane(Executor):
    """One of the worker thread's queues, as an executor."""

    def __init__(self, thread: _WorkerThread, index: int) -> None:
        self._thread, self._index = thread, index

    def submit(self, fn, /, *args, **kwargs) -> Future:
        return self._thread.submit(self._index, fn, args, kwargs)


_worker_thread = _WorkerThread("reportline-worker-thread")
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
    """Run `fn` on the shared database thread: for short queries. Its wait is measured.

    `fn` runs in a copy of the caller's context, and what it changes there stays there.
    Left to itself, asgiref copies every context variable back into the caller's task
    after each call, each of Django's `Local`s as a new object of its own: kept for as
    long as the task lives, about a kilobyte an idle page (benchmark 6).
    """
    return loop_lag.measure_wait(
        fn,
        lambda started: sync_to_async(
            started, thread_sensitive=True, context=contextvars.copy_context()
        ),
    )


_page_reads: ThreadPoolExecutor | None = None  # made on first use, sized from the settings


def page_read_threads(pool_size: int, admissions: int) -> int:
    """Return how many threads read for the pages: of a process's `pool_size` connections
    (REPORTS_DB_POOL_SIZE), `admissions` are left to task creations
    (REPORTS_ADMISSIONS_AT_ONCE) and one to the shared thread; these take at most the
    rest, and three at most (with 800 streams on two cores, three kept every wait under
    half a second)."""
    return max(1, min(3, pool_size - admissions - 1))


def _page_read_pool() -> ThreadPoolExecutor:
    global _page_reads
    if _page_reads is None:
        _page_reads = ThreadPoolExecutor(
            page_read_threads(settings.REPORTS_DB_POOL_SIZE, settings.REPORTS_ADMISSIONS_AT_ONCE),
            thread_name_prefix="reportline-page-reads",
        )
    return _page_reads


def on_page_reads[**P, R](fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Run `fn`, a short read for an open page or event stream, on one of the pages' read
    threads, in a copy of the caller's context (as `on_shared_db`). Its wait is measured.

    The connection goes back after each call as a request's does: to the pool on
    PostgreSQL (CONN_MAX_AGE 0), kept open on SQLite (no server to hold it).
    """
    return loop_lag.measure_wait(
        _giving_connection_back(fn),
        lambda started: sync_to_async(
            started,
            thread_sensitive=False,
            executor=_page_read_pool(),
            context=contextvars.copy_context(),
        ),
    )


def _giving_connection_back[**P, R](fn: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return call


def on_worker_thread[**P, R](
    fn: Callable[P, R], *, streaming: bool = False
) -> Callable[P, Awaitable[R]]:
    """Run `fn` on the worker's own thread and connection. `streaming`: a call that keeps
    text flowing and leases held (a chunk write, a lease renewal), which waits behind at
    most one of the other calls.

    `async_to_sync` inside `fn` still reaches the event loop that awaits it (asgiref's
    SyncToAsync records it for its threads), so what `fn` broadcasts on commit goes out.
    """
    lane = _worker_thread.streaming if streaming else _worker_thread.other
    return SyncToAsync(_keeping_connection(fn), thread_sensitive=False, executor=lane)


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
