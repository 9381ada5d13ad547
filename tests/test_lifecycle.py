"""Every way a task ends goes through one door: one terminal event, one `task.ended` line,
and its money settled by the rule — whether its runner, the reaper, a cancel or an
administrator ends it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models import Sum

from reports import events, lifecycle
from reports.models import Budget, CostStatus, Status, Task, TaskEvent
from reports.reconciliation import resolve_reconciliation
from reports.worker.leases import claim_next_task, reap_expired_leases
from tests.helpers import lines_of, run_all

pytestmark = pytest.mark.django_db


def by_runner(task, worker, **_):
    Task.objects.filter(pk=task.pk).update(scenario="error")  # text, then a disconnect
    run_all(worker)


def by_reaper(task, settings, **_):
    settings.REPORTS_MAX_ATTEMPTS = 1
    assert claim_next_task("a-worker-that-dies") is not None
    Task.objects.filter(pk=task.pk).update(lease_expires_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    assert len(reap_expired_leases()) == 1


def by_cancel(task, **_):
    assert lifecycle.cancel_task(task)


def by_admin(task, unanswered_task, admin_user, **_):
    assert resolve_reconciliation(unanswered_task.pk, Status.FAILED, by_user=admin_user)
    return unanswered_task


PATHS = {
    # path: (how it ends, the status it ends in, what its money becomes)
    "runner": (by_runner, Status.FAILED, {CostStatus.SETTLED, CostStatus.PENDING_RECONCILIATION}),
    "reaper": (by_reaper, Status.FAILED, {CostStatus.PENDING_RECONCILIATION}),
    "cancel": (by_cancel, Status.CANCELLED, {CostStatus.RELEASED}),
    "admin": (by_admin, Status.FAILED, {CostStatus.SETTLED, CostStatus.RELEASED}),
}


@pytest.mark.parametrize("path", PATHS)
def test_every_end_writes_one_event_one_line_and_settles_the_money(
    path, request, make_task, worker, settings, logged, admin_user
):
    end, status, money = PATHS[path]
    unanswered = request.getfixturevalue("unanswered_task") if path == "admin" else None
    task = make_task()
    logged.truncate(0)
    logged.seek(0)

    task = (
        end(
            task=task,
            worker=worker,
            settings=settings,
            unanswered_task=unanswered,
            admin_user=admin_user,
        )
        or task
    )

    task.refresh_from_db()
    assert task.status == status
    events = list(TaskEvent.objects.filter(task=task).values_list("type", flat=True))
    assert events.count(status) == 1 and events[-1] == status  # the end's own event, last
    ended = [
        line
        for line in lines_of(logged)
        if line["event"] == "task.ended" and line.get("task_id") == str(task.pk)
    ]
    assert len(ended) == 1
    assert ended[0]["status"] == status
    assert ended[0]["cost_status"] == task.cost_status
    assert task.cost_status in money
    if task.cost_status == CostStatus.PENDING_RECONCILIATION:
        assert task.reserved_micros > 0  # held for an admin
    else:
        assert task.reserved_micros == 0
    held = Task.objects.filter(owner=task.owner).aggregate(Sum("reserved_micros"))
    assert Budget.objects.get(user=task.owner).reserved_micros == held["reserved_micros__sum"]


def test_an_end_that_lost_the_race_writes_nothing(make_task, logged):
    task = make_task()
    assert lifecycle.cancel_task(task)
    logged.truncate(0)
    logged.seek(0)

    again = lifecycle.end_task(task.pk, Status.QUEUED, events.cancelled(partial=False))

    assert again is None
    assert TaskEvent.objects.filter(task=task, type=Status.CANCELLED).count() == 1
    assert [line for line in lines_of(logged) if line["event"] == "task.ended"] == []
