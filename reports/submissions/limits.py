"""What a user may still create: the limits a new task is checked against.

Four limits, checked in this order, each a 429 with a Retry-After: the user's creation
rate (REPORTS_USER_RATE_LIMIT in the sliding window), the bytes they uploaded in the last
24 hours (REPORTS_USER_UPLOAD_MB_PER_DAY), their own tasks waiting to start
(REPORTS_USER_QUEUE_LIMIT) and everyone's (REPORTS_QUEUE_LIMIT). One read answers all
four, and its text is written once: a submission is checked before its files are looked
at, again before they are stored and once more under the admission lock
(reports.submissions), and every upload pays for each check.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Min
from django.utils import timezone

from reports.auth import ApiError
from reports.models import Status, Task
from reports.observability import logs
from reports.upload_limits import MB

UPLOAD_WINDOW = timedelta(days=1)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Standing:
    """A user's part of the tasks, as one read found it at `at`."""

    at: datetime
    created: int  # their tasks created in the rate window
    uploaded: int  # bytes of their tasks created in the last 24 hours
    waiting: int  # their tasks waiting to start
    queued: int  # everyone's tasks waiting to start


def standing(user) -> Standing:
    """Read the user's standing in one statement, each count by its own index.

    Its text is written once (`_standing_sql`): built by the ORM, the statement took ten
    times the database's own work to compile, on every check of every upload.
    """
    now = timezone.now()
    rate_since = now - timedelta(seconds=settings.REPORTS_USER_RATE_WINDOW_S)
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:
        cursor.execute(
            _standing_sql(connection.ops.quote_name(Task._meta.db_table)),
            [
                *(user.pk, adapt(rate_since)),
                *(user.pk, adapt(now - UPLOAD_WINDOW)),
                *(user.pk, Status.QUEUED),
                Status.QUEUED,
            ],
        )
        created, uploaded, waiting, queued = cursor.fetchone()
    return Standing(now, created, uploaded, waiting, queued)


@functools.cache
def _standing_sql(table: str) -> str:
    return (
        f"SELECT (SELECT COUNT(*) FROM {table} WHERE owner_id = %s AND created_at > %s), "
        f"(SELECT COALESCE(SUM(input_bytes), 0) FROM {table} "
        "WHERE owner_id = %s AND created_at > %s), "
        f"(SELECT COUNT(*) FROM {table} WHERE owner_id = %s AND status = %s), "
        f"(SELECT COUNT(*) FROM {table} WHERE status = %s)"
    )


def check(user, size: int) -> None:
    """Raise ApiError 429 when a new task of `size` bytes would take `user` past a limit."""
    mine = standing(user)
    _limit_rate(user, mine)
    _limit_upload_bytes(user, mine, size)
    _limit_waiting(mine)
    _limit_queue(mine)


def _limit_rate(user, mine: Standing) -> None:
    limit = settings.REPORTS_USER_RATE_LIMIT
    if mine.created < limit:
        return
    window = timedelta(seconds=settings.REPORTS_USER_RATE_WINDOW_S)
    # The oldest of the last `limit` tasks leaves the window first: read only on a refusal.
    recent = Task.objects.filter(owner=user, created_at__gt=mine.at - window)
    times = recent.order_by("-created_at").values_list("created_at", flat=True)
    edge = list(times[limit - 1 : limit])
    if not edge:  # those tasks were deleted meanwhile
        return
    wait = max(1, math.ceil((edge[0] + window - mine.at).total_seconds()))
    raise ApiError(
        429,
        "rate_limited",
        f"You have created {limit} reports in the last "
        f"{settings.REPORTS_USER_RATE_WINDOW_S} s; try again in {wait} s.",
        {"Retry-After": str(wait)},
    )


def _limit_upload_bytes(user, mine: Standing, size: int) -> None:
    """Every upload is kept, and one user at the rate limit would otherwise add some 45 GB
    an hour to the file store."""
    limit = settings.REPORTS_USER_UPLOAD_MB_PER_DAY * MB
    if mine.uploaded + size <= limit:
        return
    since = mine.at - UPLOAD_WINDOW
    # The oldest of those uploads leaves the 24 hours first: read only on a refusal.
    recent = Task.objects.filter(owner=user, created_at__gt=since)
    first = recent.aggregate(first=Min("created_at"))["first"]
    wait = max(1, math.ceil((first - since).total_seconds())) if first else 1
    raise ApiError(
        429,
        "rate_limited",
        f"You have uploaded {mine.uploaded / MB:,.0f} MB in the last 24 hours, and these files "
        f"would take you past the {settings.REPORTS_USER_UPLOAD_MB_PER_DAY:,g} MB a day "
        f"allows; try again in {wait} s.",
        {"Retry-After": str(wait)},
    )


def _limit_waiting(mine: Standing) -> None:
    """The queue is everyone's, and one user's backlog must not fill it (queue_full for all)."""
    limit = settings.REPORTS_USER_QUEUE_LIMIT
    if mine.waiting < limit:
        return
    logs.log_event(
        log, "task.refused", logging.WARNING, error_type="rate_limited", waiting=mine.waiting
    )
    # Reckoned as for a full queue: a wait for one of theirs to start.
    slots = max(1, settings.REPORTS_MAX_RUNNING)
    wait = max(5, min(300, 10 * (mine.waiting - limit + 1) // slots))
    raise ApiError(
        429,
        "rate_limited",
        f"You have {mine.waiting} reports waiting to start, the most one person may have; "
        f"try again in {wait} s, once one has started.",
        {"Retry-After": str(wait)},
    )


def _limit_queue(mine: Standing) -> None:
    if mine.queued < settings.REPORTS_QUEUE_LIMIT:
        return
    logs.log_event(
        log, "task.refused", logging.WARNING, error_type="queue_full", queued=mine.queued
    )
    wait = retry_after_s(mine.queued)
    raise ApiError(
        429,
        "queue_full",
        f"Too many reports are waiting; try again in {wait} s.",
        {"Retry-After": str(wait)},
    )


def retry_after_s(queued: int) -> int:
    """Return a wait long enough for the queue to drain below its limit, roughly."""
    slots = max(1, settings.REPORTS_MAX_RUNNING)
    excess = queued - settings.REPORTS_QUEUE_LIMIT + 1
    return max(5, min(300, 10 * excess // slots))
