"""Clocks: the runner and the providers take one, so tests can drive time."""

import asyncio
import time
from datetime import UTC, datetime, timedelta


class Clock:
    """Monotonic time and sleeping, as the running process sees them."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def wall(self) -> datetime | None:
        """Return the instant shared with other processes, or None: the database's own
        clock (`Now()`) is the one they share."""
        return None


class FakeClock(Clock):
    """A clock that only moves when told to, or when something sleeps on it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self._start = start
        self._wall_start = datetime.now(UTC)

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)
        await asyncio.sleep(0)

    def wall(self) -> datetime:
        """Return the instant it stands at: its start in real time, moved as it moved."""
        return self._wall_start + timedelta(seconds=self.now - self._start)
