"""One way of paging through a user's tasks, newest first: the JSON list (`GET /api/tasks`)
and the home page's list of reports (`/?page=`) both read their pages here, with the same
size, the same bounds and the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

from reports.models import Task, TaskQuerySet

PAGE_SIZE = 50
MAX_PAGE = 1_000_000  # fifty million tasks: far past any list, well inside the database's numbers
OUT_OF_RANGE = f"page must be an integer from 1 to {MAX_PAGE:,}."


def page_number(raw: str | None) -> int | None:
    """Return the page a `?page=` value names (none given: 1), or None when it is not a
    whole number from 1 to MAX_PAGE written in ASCII digits."""
    if raw is None:
        return 1
    # Its length first: int() refuses to read a number of thousands of digits.
    if not (raw.isascii() and raw.isdigit() and len(raw.lstrip("0")) <= len(str(MAX_PAGE))):
        return None
    return int(raw) if 1 <= int(raw) <= MAX_PAGE else None


@dataclass(frozen=True)
class Page:
    """One page of a list of tasks: its number, its tasks, and whether an older page
    follows it (a newer one precedes every page but the first)."""

    number: int
    tasks: list[Task]
    has_older: bool

    @property
    def has_newer(self) -> bool:
        return self.number > 1


def newest_first(tasks: TaskQuerySet, number: int) -> Page:
    """Return page `number` of `tasks`, newest first, in one query."""
    start = (number - 1) * PAGE_SIZE
    # created_at has millisecond resolution on SQLite: the pk breaks ties, so that pages
    # of the same list neither repeat nor skip a task.
    rows = list(tasks.order_by("-created_at", "-pk")[start : start + PAGE_SIZE + 1])
    return Page(number=number, tasks=rows[:PAGE_SIZE], has_older=len(rows) > PAGE_SIZE)
