"""A worker's idle slots, lent to a plan of calls so its notes calls run side by side.

An attempt holds one slot of its worker. A plan's level of notes calls (its parts, or
one round) borrows up to REPORTS_PLAN_PARALLEL_CALLS - 1 more, only from slots no attempt
holds at that moment, and gives them back when the level ends; the worker claims no new
task into a lent slot. So a long task never takes a slot another task holds, and never
makes the worker run more provider calls than it has slots.
"""

from __future__ import annotations

from collections.abc import Callable


class SpareSlots:
    def __init__(self, free: Callable[[], int]) -> None:
        self.free = free  # slots no attempt holds
        self.lent = 0

    def borrow(self, wanted: int) -> int:
        """Lend up to `wanted` idle slots; return how many were lent."""
        lent = max(0, min(wanted, self.free() - self.lent))
        self.lent += lent
        return lent

    def give_back(self, count: int) -> None:
        self.lent -= count
