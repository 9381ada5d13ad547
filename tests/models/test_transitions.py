"""Every allowed and every forbidden status change of docs/lifecycle.md, through the one helper."""

import itertools

import pytest

from reports.models import TERMINAL, TRANSITIONS, IllegalTransition, Status, Task, TaskEvent

pytestmark = pytest.mark.django_db

ALLOWED = {
    ("queued", "running"),
    ("queued", "cancelled"),
    ("running", "queued"),
    ("running", "finalizing"),
    ("running", "failed"),
    ("running", "cancelled"),
    ("running", "reconciliation_required"),
    ("finalizing", "succeeded"),
    ("finalizing", "failed"),
}
PAIRS = list(itertools.product(Status.values, repeat=2))


def test_the_table_is_the_contract():
    assert {(a, b) for a, tos in TRANSITIONS.items() for b in tos} == ALLOWED


@pytest.fixture
def task_in(alice):
    def make(status: str) -> Task:
        return Task.objects.create(owner=alice, status=status, content_sha256="x")

    return make


@pytest.mark.parametrize(("frm", "to"), sorted(ALLOWED))
def test_allowed_transition_moves_the_task_and_logs_one_event(task_in, frm, to):
    task = task_in(frm)
    event = Task.objects.transition(task.pk, frm, to)
    task.refresh_from_db()
    assert event is not None
    assert task.status == to
    assert list(TaskEvent.objects.filter(task=task).values_list("seq", "type")) == [
        (1, to if to in TERMINAL else "status")
    ]


@pytest.mark.parametrize(("frm", "to"), [p for p in PAIRS if p not in ALLOWED])
def test_forbidden_transition_is_refused_and_changes_nothing(task_in, frm, to):
    task = task_in(frm)
    with pytest.raises(IllegalTransition):
        Task.objects.transition(task.pk, frm, to)
    task.refresh_from_db()
    assert task.status == frm
    assert not TaskEvent.objects.filter(task=task).exists()


@pytest.mark.parametrize(("frm", "to"), sorted(ALLOWED))
def test_transition_from_a_status_the_task_has_left_changes_nothing(task_in, frm, to):
    other = next(s for s in Status.values if s != frm)
    task = task_in(other)
    assert Task.objects.transition(task.pk, frm, to) is None
    task.refresh_from_db()
    assert task.status == other


def test_a_stale_epoch_cannot_move_the_task(task_in):
    task = task_in("running")
    Task.objects.filter(pk=task.pk).update(epoch=5)
    assert Task.objects.transition(task.pk, "running", "failed", expect_epoch=4) is None
    assert Task.objects.get(pk=task.pk).status == "running"


def test_terminal_states_have_no_way_out():
    for status in TERMINAL:
        assert TRANSITIONS[status] == frozenset()
