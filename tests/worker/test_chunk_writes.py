"""Chunks of different attempts that are ready together are written together."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async as db
from django.db import connection
from django.test.utils import CaptureQueriesContext

from reports import events
from reports.models import Task, TaskEvent, TaskQuerySet
from reports.worker import chunk_writes
from reports.worker.leases import claim_next_task, reap_expired_leases
from tests.helpers import expire_lease


@pytest.fixture
def batches(monkeypatch) -> list[int]:
    """Record how many appends each database write carried."""
    sizes: list[int] = []
    original = TaskQuerySet.append_events

    def spy(self, appends, **kind):
        sizes.append(len(appends))
        return original(self, appends, **kind)

    monkeypatch.setattr(TaskQuerySet, "append_events", spy)
    return sizes


async def running(make_task, count: int):
    for _ in range(count):
        await db(make_task)()
    return [await db(claim_next_task)("w") for _ in range(count)]


def delta(claim, text: str):
    return chunk_writes.append_event(claim.task_id, claim.epoch, events.delta(text))


@pytest.mark.django_db(transaction=True)
async def test_chunks_ready_at_once_go_in_one_write(make_task, batches):
    claims = await running(make_task, 3)
    results = await asyncio.gather(*(delta(c, f"text {i}") for i, c in enumerate(claims)))
    assert batches == [3]
    for claim, (event, cancel_requested) in zip(claims, results, strict=True):
        stored = await db(TaskEvent.objects.get)(task_id=claim.task_id, seq=event.seq)
        assert stored.type == "delta" and stored.data["text"] == event.data["text"]
        assert not cancel_requested


@pytest.mark.django_db(transaction=True)
async def test_a_lost_lease_fails_its_own_chunk_only(make_task, batches):
    kept, lost = await running(make_task, 2)
    await db(Task.objects.filter(pk=lost.task_id).update)(epoch=lost.epoch + 1)
    written, refused = await asyncio.gather(delta(kept, "kept"), delta(lost, "lost"))
    assert batches == [2]
    assert refused is None
    assert written[0].data["text"] == "kept"
    assert not await db(TaskEvent.objects.filter(task_id=lost.task_id, type="delta").exists)()


@pytest.mark.django_db(transaction=True)
async def test_two_chunks_of_one_task_keep_their_order(make_task, batches):
    (claim,) = await running(make_task, 1)
    first, second = await asyncio.gather(delta(claim, "one "), delta(claim, "two"))
    assert batches == [1, 1]  # one append per task per write: seqs follow the call order
    assert second[0].seq == first[0].seq + 1
    texts = await db(list)(
        TaskEvent.objects.filter(task_id=claim.task_id, type="delta").values_list("data__text")
    )
    assert [t for (t,) in texts] == ["one ", "two"]


@pytest.mark.django_db(transaction=True)
async def test_a_cancel_request_is_reported_with_the_chunk(make_task):
    (claim,) = await running(make_task, 1)
    task = await db(Task.objects.get)(pk=claim.task_id)
    await db(Task.objects.filter(pk=claim.task_id).update)(cancel_requested_at=task.created_at)
    _, cancel_requested = await delta(claim, "x")
    assert cancel_requested


@pytest.mark.django_db(transaction=True)
def test_a_batch_is_one_statement_on_postgresql_and_two_on_sqlite(make_task):
    make_task(), make_task()
    claims = [claim_next_task("w"), claim_next_task("w")]
    appends = [(c.task_id, c.epoch, events.delta(f"chunk {n}")) for n, c in enumerate(claims)]
    with CaptureQueriesContext(connection) as queries:
        results = Task.objects.append_events(appends)
    statements = [q["sql"] for q in queries if not q["sql"].startswith(("BEGIN", "COMMIT"))]
    assert len(statements) == (1 if connection.vendor == "postgresql" else 2)
    assert [event.data for event, _ in results] == [
        {"attempt": 1, "text": "chunk 0"},
        {"attempt": 1, "text": "chunk 1"},
    ]
    stored = TaskEvent.objects.filter(type="delta").order_by("data__text")
    assert [(e.task_id, e.seq, e.data) for e in stored] == [
        (event.task_id, event.seq, event.data) for event, _ in results
    ]


@pytest.mark.django_db(transaction=True)
def test_a_chunk_renews_the_lease_and_the_first_text_keeps_its_time(make_task, settings):
    """Chunk writes are what keep a streaming attempt's lease (its heartbeat skips a
    lease a write renewed): one that failed to would see its task reaped mid-stream."""
    task = make_task()
    claim = claim_next_task("w")
    expire_lease(task)
    Task.objects.append_events([(claim.task_id, claim.epoch, events.progress(0, 0, "reading"))])
    assert reap_expired_leases() == []
    assert Task.objects.get(pk=task.pk).first_text_at is None  # no text yet

    expire_lease(task)
    Task.objects.append_events([(claim.task_id, claim.epoch, events.delta("one"))], first_text=True)
    assert reap_expired_leases() == []
    renewed = Task.objects.get(pk=task.pk)
    assert renewed.status == "running" and renewed.first_text_at is not None
    left = (renewed.lease_expires_at - renewed.first_text_at).total_seconds()
    assert left == pytest.approx(settings.REPORTS_LEASE_S, abs=1)

    Task.objects.append_events([(claim.task_id, claim.epoch, events.delta("two"))], first_text=True)
    assert Task.objects.get(pk=task.pk).first_text_at == renewed.first_text_at
