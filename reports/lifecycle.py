"""The one way a task ends, is requeued or is cancelled (docs/lifecycle.md).

Every path that ends a task — its runner, the reaper of expired leases, a cancel of a
queued task, an administrator's resolution — calls `end_task`: one transaction writes
the task's terminal status and event, the end of its current attempt when there is
one, settles its money and writes the owner's webhook deliveries (the outbox,
`reports.webhooks.outbox`); once that commits, the event is broadcast and the
`attempt.ended` and `task.ended` lines are logged. So every end is settled, announced
and logged alike.

These functions own their transaction: call them outside any other, so that what they
announce has committed. They block; async callers run them off the event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Coalesce, Now

from reports import budgets, events, wakeups
from reports.events import Draft, Event
from reports.models import LEASED, TERMINAL, Attempt, AttemptStatus, Status, Task
from reports.observability.task_logs import log_task_ended
from reports.streaming import broadcast
from reports.webhooks import outbox


@dataclass(frozen=True)
class AttemptEnd:
    """The end of the attempt that leaves its task: the fields its row gets, and its
    `attempt.ended` line, written once the end commits (before the task's own line). The
    line is told the attempt's status and the task's as they were written: a requeue a
    cancel turned into the task's end says so."""

    attempt_id: object
    fields: dict
    log: Callable[[str, str], None] | None = None  # (attempt's status, task's status)


def end_task(
    task_id,
    frm: str,
    event: Draft,
    *,
    expect_epoch: int | None = None,
    attempt: AttemptEnd | None = None,
    resolution: bool = False,
    unknown_cost: int | None = None,
    **task_fields,
) -> Event | None:
    """Move a task from `frm` to the terminal status its `event` names (built by
    `reports.events`); return that event, written.

    `attempt` is the attempt that ends with the task.
    Money: the reservation is settled from the attempts' costs (held for an admin when
    one is unknown); `unknown_cost` instead settles a task that was waiting for an
    admin, charging that much for the unknown part. `resolution` marks an
    administrator's move out of `reconciliation_required`. Return None, writing
    nothing, when the task was no longer in `frm` (or, with `expect_epoch`, no longer
    held at that epoch): someone else moved it first.
    """
    if event.type not in TERMINAL:
        raise ValueError(f"{event.type} is not a terminal status")
    with transaction.atomic():
        written = _move(
            task_id, frm, event.type, event, expect_epoch, attempt, resolution, task_fields
        )
        if written is None:
            return None
        if unknown_cost is None:
            budgets.settle_task(task_id)
        else:
            budgets.settle_pending(task_id, unknown_cost)
        outbox.write(task_id, event.type)  # the owner's webhooks, with the end or not at all
    _announce(written, attempt)
    log_task_ended(task_id)
    return written


def requeue_task(
    task_id,
    frm: str,
    event: Draft,
    *,
    expect_epoch: int | None = None,
    attempt: AttemptEnd | None = None,
    resolution: bool = False,
    **task_fields,
) -> Event | None:
    """Put a task back in the queue for another attempt; return its `status` event
    (`event`, built by `reports.events.requeued`), written.

    The reservation stays held for the next attempt (an administrator's requeue puts
    a reservation held for reconciliation back to work). None when someone else moved
    the task first.

    A task whose cancel was asked for while its attempt ran (the attempt failed
    retryably, or its worker was lost, before it read the cancel) is not queued again:
    the next claim would clear the request and run it. It ends `cancelled` instead, its
    attempt's text kept, and that event is returned. An administrator's requeue is
    theirs to make.
    """
    unless_cancelled = None if resolution else Q(cancel_requested_at__isnull=True)
    with transaction.atomic():
        written = _move(
            task_id,
            frm,
            Status.QUEUED,
            event,
            expect_epoch,
            attempt,
            resolution,
            task_fields,
            when=unless_cancelled,
        )
        if written is not None and resolution:
            budgets.hold_again(task_id)
    if written is None:
        return None if resolution else _cancel_instead(task_id, frm, expect_epoch, attempt)
    _announce(written, attempt)
    return written


def cancel_task(task: Task) -> bool:
    """Cancel a queued task at once, or ask the runner of a leased one to stop.

    Return False when the task already ended otherwise (succeeded, failed,
    reconciliation_required); cancelling a cancelled task again is not an error.
    Cancel and completion are both compare-and-set: whichever commits first wins, and
    a task that reached `finalizing` completes.
    """
    while True:
        task.refresh_from_db(fields=["status", "attempt_count"])
        if task.status == Status.CANCELLED:
            return True
        if task.status == Status.QUEUED:
            if end_task(task.pk, Status.QUEUED, events.cancelled(partial=_text_kept(task))):
                return True
        elif task.status in LEASED:
            asked = Task.objects.filter(pk=task.pk, status__in=LEASED).update(
                cancel_requested_at=Coalesce("cancel_requested_at", Now())
            )
            if asked:
                wakeups.notify(task.pk)
                return True
        else:
            return False


def _text_kept(task: Task) -> bool:
    """Whether a queued task's latest attempt kept text: one whose worker was lost after
    text arrived. Its text is the task's, shown and counted in its body, so a cancel that
    ends it in the queue says it ended partial."""
    return (
        Attempt.objects.filter(task_id=task.pk, number=task.attempt_count).exclude(text="").exists()
    )


def _cancel_instead(task_id, frm: str, expect_epoch: int | None, attempt: AttemptEnd | None):
    """End a task whose requeue a cancel asked for meanwhile stopped: `cancelled`, its
    attempt's text kept (`partial`), the attempt no longer waiting for a retry. None when
    the task had moved on otherwise (not in `frm`, or not at `expect_epoch`)."""
    fields = attempt.fields if attempt is not None else {}
    if fields.get("status") == AttemptStatus.RETRY_SCHEDULED:
        fields = {**fields, "status": AttemptStatus.CANCELLED}
        attempt = dataclasses.replace(attempt, fields=fields)
    return end_task(
        task_id,
        frm,
        events.cancelled(partial=bool(fields.get("text"))),
        expect_epoch=expect_epoch,
        attempt=attempt,
    )


def _move(task_id, frm, to, event, expect_epoch, attempt, resolution, task_fields, when=None):
    """The transition and the attempt's end, in the caller's transaction."""
    written = Task.objects.transition(
        task_id,
        frm,
        to,
        expect_epoch=expect_epoch,
        event=event,
        resolution=resolution,
        when=when,
        **task_fields,
    )
    if written is not None and attempt is not None:
        Attempt.objects.filter(pk=attempt.attempt_id).update(ended_at=Now(), **attempt.fields)
    return written


def _announce(event: Event, attempt: AttemptEnd | None) -> None:
    """Once the change committed: fan its event out, and log the attempt's end."""
    broadcast.publish_sync([event])
    if attempt is not None and attempt.log is not None:
        attempt.log(attempt.fields["status"], event.status)
