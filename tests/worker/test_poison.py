"""A document whose reading blocked or killed its worker is not handed to another worker."""

from __future__ import annotations

import pytest

from reports.models import Attempt, Task, TaskEvent
from reports.worker import leases
from reports.worker.leases import claim_next_task, mark_parsing, reap_expired_leases
from tests.helpers import expire_lease

pytestmark = pytest.mark.django_db


def test_a_worker_lost_while_parsing_fails_the_task_as_invalid_input(make_task):
    task = make_task()
    claim = claim_next_task("w")
    assert mark_parsing(claim.task_id, claim.attempt_id, claim.epoch, True)
    expire_lease(task)

    assert len(reap_expired_leases()) == 1

    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", "invalid_input")
    assert task.user_message == leases.POISON
    assert task.cost_status == "released"  # the provider was never called
    attempt = Attempt.objects.get(task=task)
    assert (attempt.status, attempt.error_type) == ("failed", "invalid_input")
    terminal = TaskEvent.objects.filter(task=task).last()
    assert (terminal.type, terminal.data["error_type"]) == ("failed", "invalid_input")
    assert claim_next_task("w") is None  # nobody else reads it


def test_a_worker_lost_after_parsing_is_rerun_as_before(make_task):
    task = make_task()
    claim = claim_next_task("w")
    assert mark_parsing(claim.task_id, claim.attempt_id, claim.epoch, True)
    assert mark_parsing(claim.task_id, claim.attempt_id, claim.epoch, False)
    expire_lease(task)

    reap_expired_leases()

    assert Task.objects.get(pk=task.pk).status == "queued"
    assert Attempt.objects.get(task=task).error_type == "worker_lost"


def test_marking_parsing_is_fenced_by_the_epoch(make_task):
    make_task()
    claim = claim_next_task("w")
    Task.objects.filter(pk=claim.task_id).update(epoch=claim.epoch + 1)
    assert not mark_parsing(claim.task_id, claim.attempt_id, claim.epoch, True)
    assert Attempt.objects.get(pk=claim.attempt_id).parsing_since is None
