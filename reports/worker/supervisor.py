"""The worker supervisor: claim work within the caps, run attempts, renew leases, reap.

The same supervisor runs embedded on the ASGI server's event loop (the default: one
`runserver` is the whole system) or alone under `manage.py reportworker`.

A lane here is always a queue lane (short, long: the API's word), the lanes it claims
from. The threads that take blocking work off the event loop (reports/threads.py) are
called by the names of their doors, `on_shared_db` and `on_worker_thread`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from django.conf import settings
from django.db import close_old_connections

from reports import parsers, wakeups
from reports.clock import Clock
from reports.observability import logs, tracing
from reports.observability.logs import log_event
from reports.observability.task_logs import ms_between
from reports.parsers import sandbox
from reports.providers import concurrency, get_provider
from reports.providers.base import Provider
from reports.streaming import broadcast
from reports.threads import in_blocking_pool, on_shared_db, on_worker_thread
from reports.webhooks.sender import Sender
from reports.worker import identity, leases, prepared
from reports.worker.attempt_core import CANCEL, LEASE_LOST
from reports.worker.leases import Claim
from reports.worker.pipeline import AttemptRun, RunResult
from reports.worker.slots import SpareSlots

log = logging.getLogger(__name__)
task_log = logging.getLogger("reports.tasks")  # the lines of a task's life share one name


class Supervisor:
    def __init__(
        self,
        *,
        slots: int = 4,
        lanes: tuple[str, ...] = ("short", "long"),
        clock: Clock | None = None,
        provider: Provider | None = None,
        poll_s: float | None = None,
        finish_one_at_a_time: bool = False,
    ) -> None:
        self.slots = slots
        self.lanes = lanes  # the queue lanes it claims from
        self.clock = clock or Clock()
        self.provider = provider or get_provider(clock=self.clock)
        self.poll_s = poll_s if poll_s is not None else settings.REPORTS_POLL_S
        self.worker_id = identity.new_worker_id()
        self.running: dict[str, asyncio.Task] = {}
        self.spare = SpareSlots(lambda: self.slots - len(self.running))
        # Embedded in the web server, its attempts finish one at a time
        # (`AttemptRun._finalize`): reports that end together take turns at their
        # validation, rendering, save and end, rather than all take turns on the
        # interpreter with the event loop that carries every page's text. A worker of its
        # own finishes them side by side: there the wait is its database's round trips,
        # and no page waits on its loop (docs/benchmarks.md, "One report finished at a
        # time").
        self.finishing = asyncio.Lock() if finish_one_at_a_time else None
        self._wake = asyncio.Event()
        self._stopping = False
        self.listening = asyncio.Event()  # set while it hears new tasks at once (LISTEN)
        self.idle = asyncio.Event()  # set while it waits with nothing left to look at
        self.looked_at: float | None = None  # monotonic time of the last look that worked

    # --- units of work (tests call these) -------------------------------------------------

    async def claim_and_start(self) -> bool:
        """Claim one task and start running it; return whether work was found."""
        if len(self.running) + self.spare.lent >= self.slots or self._stopping:
            return False
        claim_and_read = on_shared_db(prepared.claim_and_read)
        claimed = await claim_and_read(self.worker_id, self.lanes, self.clock)
        if claimed is None:
            return False
        claim, stored = claimed
        await broadcast.publish(claim.events)
        run = AttemptRun(claim, stored, self.provider, self.clock, self.spare, self.finishing)
        key = str(claim.attempt_id)
        self.running[key] = asyncio.create_task(self._run(run), name=f"attempt-{key}")
        return True

    async def learn_slots(self) -> None:
        """Ask the provider how many calls it runs at once (llama-server's slots), so
        claims keep to it (reports.providers.concurrency): before the loop's first claim,
        and again at each reap."""
        if not self.provider.learns_from_calls:
            return
        try:
            slots = await self.provider.concurrency()
            await on_shared_db(concurrency.record_slots)(slots)
        except Exception:
            log.exception("could not learn the provider's slots; going on without")

    async def reap(self) -> int:
        """Requeue or fail tasks whose lease expired; return how many."""
        # What request signals do for the web process's connections.
        await on_shared_db(close_old_connections)()
        events = await on_shared_db(leases.reap_expired_leases)()  # announced on commit
        if events:
            self._wake.set()
        return len(events)

    async def wait_for_attempts(self) -> None:
        """Wait for every attempt started so far to end."""
        while self.running:
            await asyncio.gather(*self.running.values(), return_exceptions=True)

    # --- the loop -------------------------------------------------------------------------

    async def run_forever(self) -> None:
        log.info(
            "worker %s started with %d slots, lanes %s", self.worker_id, self.slots, self.lanes
        )
        # The first report's parse then finds a child started (reports.parsers.sandbox).
        try:
            await in_blocking_pool(sandbox.keep_a_child_ready)(parsers.readers_to_warm())
        except OSError as exc:  # its first parse starts one, or says why it cannot
            log.warning("could not start a parse child ahead of time: %s", exc)
        listener = asyncio.create_task(wakeups.listen(self.wake, self._set_listening))
        # What the provider runs beside the worker (the `local` provider's model server).
        companion = asyncio.create_task(self.provider.serve(), name="provider-companion")
        # Ended tasks' webhooks (docs/webhooks.md), sent beside the claims, never in their way.
        webhooks = asyncio.create_task(
            Sender(self.clock, self.poll_s).run_forever(), name="webhook-sender"
        )
        try:
            await self._loop()
        finally:
            for helper in (listener, companion, webhooks):
                helper.cancel()
            await asyncio.gather(listener, companion, webhooks, return_exceptions=True)

    async def _loop(self) -> None:
        reap_every = max(1.0, settings.REPORTS_LEASE_S / 3)
        last_reap = -reap_every
        while not self._stopping:
            self._wake.clear()  # before looking, so a wake-up during the look is kept
            try:
                now = asyncio.get_running_loop().time()
                if now - last_reap >= reap_every:
                    await self.reap()
                    await self.learn_slots()  # a server restarted may have other slots
                    last_reap = now
                while await self.claim_and_start():
                    pass
                self.looked_at = self.clock.monotonic()
            except Exception:
                log.exception("worker loop error; retrying")
            if not self._wake.is_set():
                self.idle.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.poll_s)
            self.idle.clear()

    def is_current(self) -> bool:
        """Return whether the loop looked for work successfully (so reached the database)
        recently enough that its running attempts' leases are being renewed."""
        if self.looked_at is None or self._stopping:
            return False
        return self.clock.monotonic() - self.looked_at < max(
            settings.REPORTS_LEASE_S / 2, 3 * self.poll_s
        )

    async def shutdown(self) -> None:
        """Stop claiming; let running attempts end (a lease left behind is reaped)."""
        self._stopping = True
        self._wake.set()
        await self.wait_for_attempts()

    def wake(self) -> None:
        self._wake.set()
        self.idle.clear()

    def _set_listening(self, listening: bool) -> None:
        if listening:
            self.listening.set()
        else:
            self.listening.clear()

    async def _run(self, run: AttemptRun) -> RunResult:
        claim = run.claim
        with (
            logs.bound(
                task_id=claim.task_id,
                attempt_id=claim.attempt_id,
                request_id=claim.request_id,
                trace_id=claim.trace_id,
            ),
            tracing.attempt(claim),
        ):
            log_claimed(claim)
            return await self._run_bound(run)

    async def _run_bound(self, run: AttemptRun) -> RunResult:
        heartbeat = asyncio.create_task(self._heartbeat(run))
        try:
            return await run.run()
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
            self.running.pop(str(run.claim.attempt_id), None)
            self._wake.set()

    async def _heartbeat(self, run: AttemptRun) -> None:
        """Renew the lease every few seconds; pass on a cancel or a lost lease.

        A streaming attempt's chunk writes renew its lease and read its cancel already:
        a beat that comes within an interval of one is skipped, so the beats of the
        attempts that stream write nothing.

        Real time, not the injected clock: the lease expires on the database's clock.
        """
        interval = max(0.2, settings.REPORTS_LEASE_S / 5)
        while True:
            await asyncio.sleep(interval)
            if time.monotonic() - run.renewed_at < interval:
                continue
            try:
                renew = on_worker_thread(leases.renew_lease, streaming=True)
                if await renew(run.task_id, run.claim.epoch):
                    run.request_stop(CANCEL)
            except leases.LeaseLost:
                run.request_stop(LEASE_LOST)
                return
            except Exception:
                log.exception("heartbeat of task %s failed; trying again", run.task_id)


_embedded: Supervisor | None = None


def start_embedded() -> None:
    """Start the embedded supervisor on the running event loop, once per process."""
    global _embedded
    if _embedded is not None or not settings.REPORTS_EMBEDDED_WORKER:
        return
    _embedded = Supervisor(slots=settings.REPORTS_EMBEDDED_SLOTS, finish_one_at_a_time=True)
    wakeups.subscribe(wakeups.NEW_TASK, _embedded.wake)
    task = asyncio.get_running_loop().create_task(
        _embedded.run_forever(), name="reportline-embedded-worker"
    )
    task.add_done_callback(_report_death)


def _report_death(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the embedded worker stopped", exc_info=task.exception())


def log_claimed(claim: Claim) -> None:
    log_event(
        task_log,
        "attempt.claimed",
        attempt=claim.number,
        lane=claim.lane,
        status="running",
        # queue_ms is the task's (submit → first claim); wait_ms this attempt's own wait.
        queue_ms=ms_between(claim.created_at, claim.started_at) if claim.number == 1 else None,
        wait_ms=ms_between(claim.queued_since, claim.started_at),
    )
