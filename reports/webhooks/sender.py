"""The worker's webhook sender: due deliveries go out a few at once, each POST on a thread
of its own, so a slow endpoint never holds the supervisor's claims or the streams; and one
a user at a time, so one user's slow endpoints never hold every place."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from reports.clock import Clock
from reports.threads import on_shared_db
from reports.webhooks import delivery

log = logging.getLogger(__name__)

IN_FLIGHT = 4  # POSTs at once in one worker process


class Sender:
    def __init__(self, clock: Clock, poll_s: float, in_flight: int = IN_FLIGHT) -> None:
        self.clock = clock
        self.poll_s = poll_s
        self.in_flight = in_flight
        self._posts = ThreadPoolExecutor(in_flight, thread_name_prefix="reportline-webhooks")
        self._sending: dict[asyncio.Task, int] = {}  # each send, and whose it is

    async def run_forever(self) -> None:
        try:
            while True:
                try:
                    await self.send_due()
                except Exception:
                    log.exception("webhook sender error; retrying")
                await asyncio.sleep(self.poll_s)
        finally:
            for task in list(self._sending):
                task.cancel()
            self._posts.shutdown(wait=False, cancel_futures=True)

    async def send_due(self) -> int:
        """Claim as many due deliveries as there are free places, and start sending them."""
        free = self.in_flight - len(self._sending)
        busy = set(self._sending.values())
        jobs = await on_shared_db(delivery.claim_due)(free, self.clock, busy)
        for job in jobs:
            task = asyncio.create_task(self._send(job), name=f"webhook-{job.delivery_id}")
            self._sending[task] = job.user_id
            task.add_done_callback(self._done)
        return len(jobs)

    def _done(self, task: asyncio.Task) -> None:
        self._sending.pop(task, None)

    async def _send(self, job: delivery.Job) -> None:
        loop = asyncio.get_running_loop()
        outcome = await loop.run_in_executor(self._posts, delivery.send, job, self.clock)
        await on_shared_db(delivery.record)(job, outcome, self.clock)
