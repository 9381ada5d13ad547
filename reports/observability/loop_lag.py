"""How long this process keeps work waiting: its event loop's lag and its database queue.

* Loop lag: a watchdog thread asks the loop to answer (`call_soon_threadsafe`) every
  `INTERVAL_S`; the time from the ask to the answer is how late the loop wakes up for
  anything. When the loop has not answered within `REPORTS_LOOP_LAG_WARN_MS`, the
  watchdog reads the loop thread's stack and the asyncio task then running (attempts run
  in tasks named `attempt-<attempt_id>`, with the task's ids bound in their context) and
  logs one warning for that stall, so an operator sees a stall and who caused it.
* Database queue wait: `reports.threads.on_shared_db` and `on_page_reads` record, for each
  call, the time from the call to the moment a thread starts it.

Unlike the figures of `reports.observability.metrics`, which are derived from the task
table and so are the same whichever process is scraped, these are per process and kept
in memory: /metrics shows the scraped web process's own loop, and a `reportworker`
serves its own on `--metrics-port`. They start again from zero with each process.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from prometheus_client import CollectorRegistry, Counter, Histogram

from reports.observability import logs
from reports.observability.logs import log_event

log = logging.getLogger(__name__)

INTERVAL_S = 0.25  # how often the watchdog asks; the warning needs no finer tick
TOP_FRAMES = 8  # innermost frames of the loop thread's stack logged with a stall
RECENT = 1000  # samples kept for the staff page's percentiles
BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

registry = CollectorRegistry(auto_describe=True)
LOOP_LAG = Histogram(
    "reportline_event_loop_lag_seconds",
    "This process: how late its event loop answered the watchdog (asked to answer at once).",
    buckets=BUCKETS_S,
    registry=registry,
)
DB_WAIT = Histogram(
    "reportline_shared_db_wait_seconds",
    "This process: time from a call to the shared database thread or a page read thread "
    "until it started running.",
    buckets=BUCKETS_S,
    registry=registry,
)
STALLS = Counter(
    "reportline_event_loop_stalls",
    "This process: times its event loop did not answer within REPORTS_LOOP_LAG_WARN_MS.",
    registry=registry,
)


@dataclass
class Stall:
    """One time the loop did not answer within the threshold, and who held it."""

    at: datetime
    task_name: str  # the asyncio task running when the watchdog looked ("" for a callback)
    task_id: str
    attempt_id: str
    frames: list[str]
    held_ms: float | None = None  # set once the loop answers again


@dataclass
class Recent:
    """The latest figures of this process, for the staff latency page."""

    lag_ms: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    db_wait_ms: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    stalls: deque[Stall] = field(default_factory=lambda: deque(maxlen=20))


recent = Recent()


def record_lag(seconds: float) -> None:
    LOOP_LAG.observe(seconds)
    recent.lag_ms.append(seconds * 1000)


def record_db_wait(seconds: float) -> None:
    DB_WAIT.observe(seconds)
    recent.db_wait_ms.append(seconds * 1000)


def measure_wait[**P, R](
    fn: Callable[P, R], submit: Callable[[Callable[[], R]], Callable[[], Awaitable[R]]]
) -> Callable[P, Awaitable[R]]:
    """Return an async `fn` run through `submit` (a way off the loop), recording its wait."""

    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        queued = time.monotonic()

        def started() -> R:
            record_db_wait(time.monotonic() - queued)
            return fn(*args, **kwargs)

        return await submit(started)()

    return call


class LoopMonitor:
    """Watch one event loop from a thread of its own; start it on the loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, warn_s: float, interval_s: float):
        self.loop = loop
        self.warn_s = warn_s
        self.interval_s = interval_s
        self.loop_thread = threading.get_ident()
        self._answered = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="reportline-loop-watchdog", daemon=True
        )

    def start(self) -> LoopMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._answered.set()
        self._thread.join(timeout=5)

    def _gone(self) -> bool:
        return self._stopped.is_set() or self.loop.is_closed()

    def _watch(self) -> None:
        while not self._gone():
            self._answered.clear()
            asked = time.monotonic()
            try:
                self.loop.call_soon_threadsafe(self._answer, asked)
            except RuntimeError:  # the loop closed
                return
            if not self._answered.wait(self.warn_s):
                # A loop that is not running (not yet, or between runs) holds nobody up.
                stall = self._stalled() if self.loop.is_running() else None
                # Wait for the answer (however long), so one stall is one warning.
                while not self._answered.wait(1.0):
                    if self._gone():
                        return
                if stall is not None:
                    stall.held_ms = round((time.monotonic() - asked) * 1000, 1)
            self._stopped.wait(self.interval_s)

    def _answer(self, asked: float) -> None:
        record_lag(time.monotonic() - asked)
        self._answered.set()

    def _stalled(self) -> Stall:
        """Record and log who holds the loop now: its running task and its stack."""
        frame = sys._current_frames().get(self.loop_thread)
        frames = (
            [
                f"{f.filename}:{f.lineno} in {f.name}"
                for f in traceback.extract_stack(frame)[-TOP_FRAMES:]
            ]
            if frame is not None
            else []
        )
        task = asyncio.current_task(self.loop)
        name = task.get_name() if task is not None else ""
        ids = logs.context_of(task.get_context()) if task is not None else {}
        attempt_id = ids.get("attempt_id", "")
        if not attempt_id and name.startswith("attempt-"):
            attempt_id = name.removeprefix("attempt-")
        stall = Stall(
            at=datetime.now(UTC),
            task_name=name,
            task_id=ids.get("task_id", ""),
            attempt_id=attempt_id,
            frames=frames,
        )
        recent.stalls.append(stall)
        STALLS.inc()
        log_event(
            log,
            "event_loop.stalled",
            logging.WARNING,
            threshold_ms=round(self.warn_s * 1000),
            asyncio_task=name or "(a callback, no task)",
            task_id=stall.task_id or None,
            attempt_id=attempt_id or None,
            frames=frames,
        )
        return stall


_monitor: LoopMonitor | None = None
_starting = threading.Lock()


def watch_running_loop() -> None:
    """Start watching the running event loop, once per process (again for a new loop)."""
    global _monitor
    loop = asyncio.get_running_loop()
    if _monitor is not None and _monitor.loop is loop:
        return  # the usual case, without the lock: once per connection under ASGI
    with _starting:
        if _monitor is not None and _monitor.loop is loop:
            return
        if _monitor is not None:
            _monitor.stop()
        _monitor = LoopMonitor(
            loop,
            warn_s=settings.REPORTS_LOOP_LAG_WARN_MS / 1000,
            interval_s=INTERVAL_S,
        ).start()
