"""Reads compiled once give what the ORM gives, every time after the first, on both
databases; a read whose parameters are not the ORM's fails at once."""

import gc
import threading
import uuid
import weakref
from datetime import timedelta

import pytest
from django.db import connections
from django.db.models import Count, Value
from django.db.models.functions import Length
from django.forms.models import model_to_dict
from django.utils import timezone

from reports.models import (
    Attempt,
    CircuitState,
    CompiledInsert,
    CompiledRead,
    Document,
    ProviderCircuit,
    ProviderFigures,
    Status,
    Task,
    TaskEvent,
)
from reports.models.compiled import ParametersDiffer
from reports.providers import concurrency
from reports.serving.task_body import task_bodies
from reports.worker import leases

pytestmark = pytest.mark.django_db

LANES = [("short",), ("long",), ("short", "long")]


@pytest.fixture
def tasks(alice, bob):
    """Queued, delayed, running and expired tasks of two owners in both lanes."""
    now = timezone.now()
    made = []
    for i, (owner, lane, status, not_before, lease) in enumerate(
        [
            (alice, "short", Status.QUEUED, None, None),
            (bob, "short", Status.QUEUED, now - timedelta(seconds=5), None),
            (alice, "long", Status.QUEUED, now + timedelta(hours=1), None),  # not yet
            (bob, "long", Status.QUEUED, None, None),
            (alice, "short", Status.RUNNING, None, now + timedelta(minutes=5)),
            (bob, "long", Status.RUNNING, None, now + timedelta(minutes=5)),
            (bob, "short", Status.RUNNING, None, now - timedelta(minutes=5)),  # expired
            (alice, "short", Status.SUCCEEDED, None, None),
        ]
    ):
        task = Task.objects.create(
            owner=owner,
            lane=lane,
            status=status,
            not_before=not_before,
            lease_expires_at=lease,
            content_sha256=f"x{i}",
            request_id=f"req-{i}",
        )
        # Out of creation order, so the claim's order is the one under test.
        Task.objects.filter(pk=task.pk).update(created_at=now - timedelta(minutes=(i * 7) % 5))
        made.append(task)
    return made


def _orm_oldest(lanes, skipped):
    queued = Task.objects.eligible().filter(lane__in=lanes).exclude(owner_id__in=skipped)
    row = queued.order_by("created_at", "pk").values_list(*leases._HEAD).first()
    return None if row is None else tuple(row)


def test_the_claims_reads_give_what_the_orm_gives_again_and_again(tasks, alice, bob):
    for _ in range(2):  # the second round runs the statements compiled by the first
        for lanes in LANES:
            expected = Task.objects.eligible().filter(lane__in=lanes).exists()
            assert (leases._ANY_ELIGIBLE.first(lanes) is not None) == expected
            for skipped in [(), (alice.pk,), (bob.pk,), (alice.pk, bob.pk)]:
                found = leases._OLDEST.first(lanes, skipped)
                assert (None if found is None else tuple(found)) == _orm_oldest(lanes, skipped)
        grouped = Task.objects.live_leases().values_list("lane", "owner_id")
        expected = sorted(grouped.annotate(n=Count("id")).order_by())
        assert sorted(map(tuple, leases._LIVE_LEASES.rows())) == expected
        # What the next round reads has moved: a new oldest, a lease fewer.
        Task.objects.filter(pk=tasks[0].pk).update(status=Status.CANCELLED)
        Task.objects.filter(pk=tasks[4].pk).update(lease_expires_at=timezone.now())


def test_the_oldest_comes_back_with_its_times_aware_and_its_id_a_uuid(tasks):
    head = leases._Head(*leases._OLDEST.first(("short", "long"), ()))
    task = Task.objects.get(pk=head.pk)
    assert head.created_at == task.created_at and timezone.is_aware(head.created_at)
    assert (head.lane, head.request_id, head.epoch) == (task.lane, task.request_id, task.epoch)


def test_a_model_read_gives_the_instance_first_would(db):
    assert ProviderCircuit.objects.current() is None
    assert concurrency.read_figures("nobody's") is None
    ProviderCircuit.objects.create(
        provider="simulated", state=CircuitState.OPEN, trips=2, retry_at=timezone.now()
    )
    ProviderFigures.objects.create(key="the key", slots=3, reading_tokens_per_s=140.5)
    circuit = ProviderCircuit.objects.current()
    orm = ProviderCircuit.objects.filter(provider="simulated").first()
    assert model_to_dict(circuit) == model_to_dict(orm)
    assert circuit.changed_at == orm.changed_at and timezone.is_aware(circuit.changed_at)
    assert not circuit._state.adding  # saved as the row it was read from
    circuit.state = CircuitState.CLOSED
    circuit.save()
    assert ProviderCircuit.objects.current().is_closed
    figures = concurrency.read_figures("the key")
    assert (figures.slots, figures.reading_tokens_per_s) == (3, 140.5)


@pytest.mark.parametrize("cap", [1, 2])
def test_a_tasks_place_in_line_is_the_orms_with_the_cap_of_the_day(tasks, settings, cap):
    settings.REPORTS_USER_MAX_RUNNING = cap  # one statement for both: the cap is a value
    Task.objects.filter(pk=tasks[4].pk).update(lease_expires_at=timezone.now())
    # Bob holds a live lease, Alice none: at a cap of 1 his older task waits behind hers.
    orm = {task.pk: task.queue_place for task in Task.objects.with_queue_position()}
    assert orm[tasks[0].pk] == (1 if cap == 1 else 2)
    for task in tasks:
        placed = Task.objects.placed(task.pk)
        assert model_to_dict(placed) == model_to_dict(Task.objects.get(pk=task.pk))
        assert placed.queue_place == task.read_queue_position() == orm[task.pk]
    assert Task.objects.placed(uuid.uuid4()) is None


def test_a_tasks_attempts_come_with_their_texts_length_and_without_their_text(make_task):
    first, second, third = make_task(), make_task(), make_task()
    now = timezone.now()  # ended: a running attempt's length is its streamed text's
    for task, texts in ((first, ["abc", "a longer text"]), (third, ["z" * 5000])):
        for number, text in enumerate(texts, start=1):
            Attempt.objects.create(
                task=task, number=number, epoch=number, worker_id="w", text=text, ended_at=now
            )
    for _ in range(2):  # the second round runs the statement compiled by the first
        bodies = task_bodies([first, second, third])
        assert [[a["number"] for a in body["attempts"]] for body in bodies] == [[1, 2], [], [1]]
        assert [body["text_length"] for body in bodies] == [13, 0, 5000]
        assert all("text" not in a.__dict__ for a in first.numbered_attempts)  # never read
    assert task_bodies([]) == []


def test_each_shape_is_compiled_once_and_filled_in_after(tasks):
    built = []

    def build(lanes):
        built.append(len(lanes))
        return Task.objects.filter(lane__in=lanes).values_list("lane").order_by("lane")

    lane = Task._meta.get_field("lane")
    read = CompiledRead(build, lambda lanes: [(lane, name) for name in lanes], shape=len)
    assert {row[0] for row in read.rows(("short",))} == {"short"}
    assert {row[0] for row in read.rows(("long",))} == {"long"}  # same shape, new value
    assert {row[0] for row in read.rows(("long", "short"))} == {"long", "short"}
    assert built == [1, 2]


def test_parameters_out_of_the_orms_order_fail_the_first_read():
    lane, status = Task._meta.get_field("lane"), Task._meta.get_field("status")
    read = CompiledRead(  # the ORM sorts a filter's keywords: lane comes before status
        lambda: Task.objects.filter(status=Status.QUEUED, lane="short").values_list("pk"),
        lambda: [(status, Status.QUEUED), (lane, "short")],
    )
    with pytest.raises(ParametersDiffer):
        read.rows()


def test_a_compiled_update_changes_only_the_row_its_filter_holds(make_task):
    make_task()
    make_task()
    first, second = leases.claim_next_task("w"), leases.claim_next_task("w")
    for _ in range(2):  # the second round runs the statement compiled by the first
        assert leases.mark_sent(first.task_id, first.attempt_id, first.epoch, 1200)
        assert not leases.mark_sent(second.task_id, second.attempt_id, second.epoch + 1, 900)
        sent = dict(Attempt.objects.values_list("pk", "prompt_chars"))
        assert sent == {first.attempt_id: 1200, second.attempt_id: None}
        # Lost by its status alone (the filter reaches the task through the join).
        Task.objects.filter(pk=first.task_id).update(status=Status.QUEUED)
        assert not leases.mark_sent(first.task_id, first.attempt_id, first.epoch, 5)
        Task.objects.filter(pk=first.task_id).update(status=Status.RUNNING)


def test_a_compiled_insert_makes_the_row_create_makes(make_task):
    task = make_task()
    insert = CompiledInsert(TaskEvent)
    data = {"status": "running", "attempt": 1, "said": ["ünïcode", None, 2.5]}
    made = TaskEvent.objects.create(task=task, seq=90, type="status", data=data)
    for seq in (91, 92):  # the second runs the statement compiled by the first
        event = TaskEvent(task_id=task.pk, seq=seq, type="status", data=data)
        insert.insert([event])
        # What the database gave it, as `create` sets them: its id and its time.
        assert event.pk is not None and event.pk > made.pk
        assert event.created_at.tzinfo is not None and event.created_at >= made.created_at
        assert not event._state.adding
        stored = TaskEvent.objects.get(pk=event.pk)
        assert model_to_dict(stored) == model_to_dict(event)
        assert (stored.task_id, stored.seq, stored.data) == (task.pk, seq, data)


def test_a_compiled_insert_of_several_rows_gives_each_its_id(make_task):
    task = make_task()
    insert = CompiledInsert(Document)
    for round_ in range(2):
        documents = [
            Document(
                task=task,
                position=10 * round_ + i,
                name=f"{round_}-{i}.md",
                extension=".md",
                storage_name=f"s-{round_}-{i}",
                size=i,
                sha256=str(i) * 64,
            )
            for i in range(3)
        ]
        insert.insert(documents)
        stored = {d.pk: d.name for d in Document.objects.filter(pk__in=[d.pk for d in documents])}
        assert stored == {d.pk: d.name for d in documents}
        assert len(stored) == 3


def test_a_compiled_insert_takes_values_not_expressions(make_task, alice):
    insert = CompiledInsert(Task)
    with pytest.raises(TypeError, match="values"):
        insert.insert([Task(owner=alice, content_sha256="x", input_bytes=Length(Value("ab")))])
    with pytest.raises(TypeError, match="some rows have their id"):
        insert.insert([Task(owner=alice, content_sha256="y"), Task(owner=alice, id=None)])
    # Some rows leave their time to the database and some do not: not one statement.
    task = make_task()
    events = [
        TaskEvent(task_id=task.pk, seq=1, type="status", data={}),
        TaskEvent(task_id=task.pk, seq=2, type="status", data={}, created_at=timezone.now()),
    ]
    with pytest.raises(TypeError, match="some rows"):
        CompiledInsert(TaskEvent).insert(events)
    assert not TaskEvent.objects.filter(task=task, seq__in=[1, 2]).exists()


@pytest.mark.django_db(transaction=True)
def test_a_compiled_read_keeps_no_threads_connection():
    # A connection is its thread's: kept alive by a compiled statement, a thread's end
    # would no longer close it, and every request thread would hold a database session.
    lane = Task._meta.get_field("lane")
    read = CompiledRead(
        lambda: Task.objects.filter(lane="short").values_list("pk", "created_at"),
        lambda: [(lane, "short")],
    )
    seen = []

    def in_a_thread():
        read.rows()
        seen.append(weakref.ref(connections["default"]))
        connections["default"].close()

    thread = threading.Thread(target=in_a_thread)
    thread.start()
    thread.join()
    gc.collect()
    assert seen and seen[0]() is None
