"""Making, opening and revoking a report's share links."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.urls import reverse

from reports.auth import ApiError
from reports.models import ShareLink, Status, Task

DEFAULT_DAYS = 7
MAX_DAYS = 90


@dataclass(frozen=True)
class NewLink:
    """A link just made: its path is known now and never again (only its digest is kept)."""

    path: str
    expires_at: datetime


def read_days(raw: str | None) -> int:
    """Return the days a new link lasts, from the form field `expires_in_days`."""
    if raw is None:
        return DEFAULT_DAYS
    raw = raw.strip()
    # Its length first: int() refuses to read a number of thousands of digits.
    short = raw.isascii() and raw.isdigit() and len(raw.lstrip("0")) <= len(str(MAX_DAYS))
    if not (short and 1 <= int(raw) <= MAX_DAYS):
        raise ApiError(
            400, "invalid_request", f"expires_in_days must be a whole number from 1 to {MAX_DAYS}."
        )
    return int(raw)


def create_link(task: Task, days: int) -> NewLink:
    """Make a link that opens the succeeded `task`'s report for `days` days."""
    if task.status != Status.SUCCEEDED:
        raise ApiError(
            409, "task_not_succeeded", "Only a report that was written and saved can be shared."
        )
    if task.share_links.live().count() >= settings.REPORTS_SHARE_MAX_LINKS:
        raise ApiError(
            409,
            "share_limit_reached",
            f"This report already has {settings.REPORTS_SHARE_MAX_LINKS} live links: "
            "revoke them to make a new one.",
        )
    token, link = ShareLink.objects.issue(task, days)
    return NewLink(reverse("shared-report", args=[token]), link.expires_at)


def revoke_links(task: Task) -> int:
    """Revoke every link of `task` that still works; return how many."""
    return task.share_links.revoke()


def shared_task(token: str) -> Task | None:
    """Return the task a live link opens, or None: unknown, revoked and expired alike."""
    link = ShareLink.objects.opened_by(token)
    if link is None or link.task.status != Status.SUCCEEDED:
        return None
    return link.task
