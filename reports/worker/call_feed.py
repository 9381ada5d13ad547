"""Between a provider's stream and the runner of its call: each item goes to the call's
core (`reports.worker.attempt_core.Call`) as it arrives, and the runner wakes only for
what it must act on.

The stream is read by a task of its own (`AttemptRun._pump`), so that the runner can be
woken by a time limit or a stop while no item comes, and a stream is never cancelled in
the middle of an item. That task gives each item to the feed (`give`), which hands it to
the core at once, at the instant it arrived. Most text deltas only wait there to be
coalesced, and a heartbeat only says the provider is still there: the core decides nothing,
and the runner sleeps on. It wakes (`decisions`) when the core decided something (a chunk
to write, the reading to show, the call's end), when the provider first answered (the runner
looks at the call), when a stop was asked (`wake`), and when the call's next time limit or
write falls due (one timer a call). A runner woken for each item cost its event loop a
queue, a task switch and a timer every delta (benchmark 2).
"""

from __future__ import annotations

import asyncio

from reports.clock import Clock
from reports.worker.attempt_core import Abandon, Call, Decision, End, StreamItem


class CallFeed:
    """Gives one call's core its stream items as they come, and its runner the core's
    decisions, in order."""

    # A timer this close to the instant wanted is kept: it spares re-setting it for the
    # difference between the loop's clock and the runner's.
    SLACK_S = 0.001

    def __init__(self, call: Call, clock: Clock) -> None:
        self.call = call
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._ready: list[Decision] = []  # decided, not yet taken by the runner
        self._look = False  # the provider first answered: the runner looks at the call
        self._tick = False  # a time limit may be due, or a stop was asked
        self._ended = False  # the core ended or abandoned the call: nothing more goes in
        self._waiter: asyncio.Future | None = None
        self._timer: asyncio.Handle | None = None
        self._timer_at = 0.0  # the loop's time the timer is set for

    def give(self, item: StreamItem) -> None:
        """Hand the core a stream item, received now; wake the runner when it must act."""
        if self._ended:
            return
        answered = self.call.answered
        decided = self.call.receive(item, self._clock.monotonic())
        if decided or self.call.answered != answered:
            self._take(decided)
            self._look = True
            self._wake_runner()
        else:
            self._set_timer(self.call.next_tick_at())

    @property
    def ended(self) -> bool:
        """Whether the core ended or abandoned the call: the stream need not be read on."""
        return self._ended

    def wake(self) -> None:
        """Wake the runner to tick the core now: a stop was asked, or a write failed."""
        self._tick = True
        self._wake_runner()

    async def decisions(self) -> list[Decision]:
        """Return what the core decided since the last call, waiting until there is
        something for the runner: a decision, an item to look at, or a tick."""
        while True:
            if self._tick:
                self._tick = False
                if not self._ended:
                    self._take(self.call.tick(self._clock.monotonic()))
            if self._ready or self._look:
                ready, self._ready, self._look = self._ready, [], False
                return ready
            self._set_timer(self.call.next_tick_at())
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def close(self) -> None:
        """The call is over: no timer stays behind."""
        self._ended = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _take(self, decided: list[Decision]) -> None:
        self._ready.extend(decided)
        if any(isinstance(decision, End | Abandon) for decision in decided):
            self._ended = True

    def _wake_runner(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _set_timer(self, due: float) -> None:
        """Make sure a tick comes no later than `due`, on the runner's clock. One timer a
        call, moved only when that instant comes earlier: one that rings early (the instant
        moved later since) finds nothing due."""
        if self._ended:
            return
        at = self._loop.time() + max(0.0, due - self._clock.monotonic())
        if self._timer is not None:
            if self._timer_at <= at + self.SLACK_S:
                return
            self._timer.cancel()
        # Its instant is kept here: uvloop answers an instant already past with a plain
        # handle, which has no `when`.
        self._timer, self._timer_at = self._loop.call_at(at, self._ring), at

    def _ring(self) -> None:
        self._timer = None
        self.wake()
