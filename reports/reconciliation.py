"""An administrator's resolution of a task whose provider outcome is unknown (docs/lifecycle.md).

`TRANSITIONS` deliberately has no way out of `reconciliation_required`; this module is
the one door, and only the admin's actions call it.
"""

from __future__ import annotations

from django.conf import settings

from reports import events, lifecycle
from reports.models import ADMIN_RESOLUTIONS, Attempt, ErrorType, Event, Status, Task, TaskEvent

FAILED_MESSAGE = "Resolved by an administrator: the provider call is taken as failed."


class ResolutionRefused(Exception):
    """The resolution asked for is not allowed for this task; the message says why."""


def resolve_reconciliation(task_id, to: str, *, by_user, unknown_cost: int = 0) -> Event | None:
    """Move a task out of `reconciliation_required` to `queued` or `failed`; return its event.

    Return None when the task is not (or no longer) in `reconciliation_required`: the
    update is conditional on that status, so two admins resolving at once resolve once.

    `queued` runs the task again as a new attempt. It is refused (ResolutionRefused)
    when the task has already used `REPORTS_MAX_ATTEMPTS` attempts: the cap is a real
    bound on what a task may spend with the provider, and the unknown call may already
    have been billed, so an admin who wants one more run raises the setting on purpose
    rather than the cap being exceeded silently. Otherwise mark the task failed.

    `failed` keeps the task's own error type when it has one (else `provider_error`)
    and keeps any text the last attempt streamed, announced as partial.

    Money (reports/budgets.py): `queued` keeps the task's reservation held for the new
    attempt, and the unknown attempt's cost stays open until the task ends and an admin
    settles it. `failed` settles the task at once, charging `unknown_cost` micro-dollars
    for the unknown call: 0 (the default) when the provider did not run it, or what the
    provider's records say it cost ("mark settled").

    Nothing else is a resolution (ResolutionRefused), `succeeded` least of all: success
    means a report that passed validation and was saved (docs/lifecycle.md), and a task
    stuck in reconciliation has no validated, saved file, so nothing could honestly be
    shown or downloaded as its result.
    """
    if to not in ADMIN_RESOLUTIONS:
        raise ResolutionRefused(
            f"{to!r} is not a resolution of reconciliation_required: a task in "
            "reconciliation has no validated, saved report; requeue it or mark it failed."
        )
    task = (
        Task.objects.filter(pk=task_id, status=Status.RECONCILIATION_REQUIRED)
        .only("id", "attempt_count", "error_type")
        .first()
    )
    if task is None:
        return None
    resolved_by = by_user.get_username()
    if to == Status.QUEUED:
        if task.attempt_count >= settings.REPORTS_MAX_ATTEMPTS:
            raise ResolutionRefused(
                f"Task {task.pk} has used {task.attempt_count} of "
                f"REPORTS_MAX_ATTEMPTS={settings.REPORTS_MAX_ATTEMPTS} attempts; raise the "
                "setting to run it again, or mark it failed."
            )
        return lifecycle.requeue_task(
            task.pk,
            Status.RECONCILIATION_REQUIRED,
            events.requeued(resolved_by=resolved_by),
            resolution=True,
            error_type="",
            user_message="",
            not_before=None,
            finished_at=None,
        )
    error_type = task.error_type or ErrorType.PROVIDER_ERROR
    return lifecycle.end_task(
        task.pk,
        Status.RECONCILIATION_REQUIRED,
        events.failed(
            error_type,
            FAILED_MESSAGE,
            partial=_last_attempt_has_text(task),
            resolved_by=resolved_by,
        ),
        resolution=True,
        unknown_cost=unknown_cost,
        error_type=error_type,
        user_message=FAILED_MESSAGE,
    )


def _last_attempt_has_text(task: Task) -> bool:
    text = (
        Attempt.objects.filter(task_id=task.pk, number=task.attempt_count)
        .values_list("text", flat=True)
        .first()
    )
    # The attempt's text is copied from its delta events when the attempt ends; read
    # the events too in case it ended some other way.
    return bool(text) or bool(TaskEvent.objects.attempt_text(task.pk, task.attempt_count))
