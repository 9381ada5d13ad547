"""The live stream over the real ASGI application: who may connect, and what they get."""

from __future__ import annotations

import re
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from project.asgi import application
from reports.models import Status, Task
from reports.streaming import broadcast
from reports.worker import leases
from tests.helpers import submit, task_of

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1")
DELTA = re.compile(r'<template data-delta data-seq="(\d+)" data-attempt="(\d+)">(.*?)</template>')
BATCH_SEQ = re.compile(r'<template data-batch data-seq="(\d+)">')


@sync_to_async
def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@sync_to_async
def queued_task(user) -> Task:
    client = Client()
    client.force_login(user)
    return task_of(submit(client))


@sync_to_async
def claim(task: Task) -> leases.Claim:
    found = leases.claim_next_task("test-worker")
    assert found is not None and found.task_id == task.pk
    return found


@sync_to_async
def persist_delta(claim: leases.Claim, text: str):
    """Write a delta event the way the worker does, without fanning it out."""
    event, _ = Task.objects.append_event(
        claim.task_id, claim.epoch, "delta", {"text": text, "attempt": claim.number}
    )
    return event


@sync_to_async
def persist_success(claim: leases.Claim):
    Task.objects.transition(
        claim.task_id, Status.RUNNING, Status.FINALIZING, expect_epoch=claim.epoch
    )
    return Task.objects.transition(
        claim.task_id,
        Status.FINALIZING,
        Status.SUCCEEDED,
        expect_epoch=claim.epoch,
        event=("succeeded", {"result_id": str(uuid.uuid4())}),
        report_html="<h1>Done</h1>",
    )


def communicator(task_id, *, cookie: bytes | None, origin=ORIGIN, after: int | None = 0):
    path = f"/ws/tasks/{task_id}/" + (f"?after={after}" if after is not None else "")
    headers = [origin] if origin else []
    if cookie:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, path, headers=headers)


async def receive_until_seq(comm: WebsocketCommunicator, seq: int) -> list[str]:
    """Receive messages until one covers `seq`; return them all."""
    messages = []
    while True:
        message = await comm.receive_from(timeout=5)
        messages.append(message)
        if int(BATCH_SEQ.search(message)[1]) >= seq:
            return messages


def deltas(messages: list[str]) -> list[tuple[int, str]]:
    return [(int(s), text) for m in messages for s, _, text in DELTA.findall(m)]


async def test_owner_is_accepted(alice):
    task = await queued_task(alice)
    comm = communicator(task.pk, cookie=await session_cookie(alice))
    connected, _ = await comm.connect()
    assert connected
    await comm.disconnect()


async def refused(comm: WebsocketCommunicator) -> None:
    connected, _ = await comm.connect()
    assert not connected  # closed before accept: the server answers the handshake 403
    assert await comm.receive_nothing(timeout=0.2)
    await comm.disconnect()


async def test_other_user_is_refused(alice, bob):
    task = await queued_task(alice)
    await refused(communicator(task.pk, cookie=await session_cookie(bob)))


async def test_anonymous_user_is_refused(alice):
    task = await queued_task(alice)
    await refused(communicator(task.pk, cookie=None))


async def test_foreign_origin_is_refused(alice):
    task = await queued_task(alice)
    cookie = await session_cookie(alice)
    await refused(communicator(task.pk, cookie=cookie, origin=(b"origin", b"https://evil.test")))


@pytest.mark.parametrize("task_id", ["not-a-uuid", str(uuid.uuid4())])
async def test_malformed_or_missing_task_is_refused(alice, task_id):
    await refused(communicator(task_id, cookie=await session_cookie(alice)))


async def test_malformed_resume_point_is_refused(alice):
    task = await queued_task(alice)
    comm = communicator(task.pk, cookie=await session_cookie(alice))
    comm.scope["query_string"] = b"after=-1"
    await refused(comm)


async def test_replays_after_seq_then_goes_live_filling_a_dropped_message(alice):
    task = await queued_task(alice)
    run = await claim(task)  # seq 1: running, attempt 1
    await persist_delta(run, "Hello ")  # seq 2
    await persist_delta(run, "<world>")  # seq 3
    comm = communicator(task.pk, cookie=await session_cookie(alice), after=2)
    connected, _ = await comm.connect()
    assert connected

    replay = await receive_until_seq(comm, 3)
    assert deltas(replay) == [(3, "&lt;world&gt;")]  # only after seq 2, escaped

    live = await persist_delta(run, " one")  # seq 4, fanned out
    await broadcast.publish([live])
    assert deltas(await receive_until_seq(comm, 4)) == [(4, " one")]

    await persist_delta(run, " two")  # seq 5: in the table, its message lost
    after_gap = await persist_delta(run, " three")  # seq 6
    await broadcast.publish([after_gap])
    assert deltas(await receive_until_seq(comm, 6)) == [(5, " two"), (6, " three")]

    done = await persist_success(run)  # seq 7 finalizing, seq 8 succeeded
    await broadcast.publish([done])
    final = await receive_until_seq(comm, 8)
    text = "".join(final)
    assert 'data-task-status="succeeded"' in text
    assert 'hx-swap-oob="true"' in text
    assert "<h1>Done</h1>" in text and "data-download" in text
    assert deltas(final) == []
    closed = await comm.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 1000}
    await comm.disconnect()


async def test_a_replay_is_coalesced_into_one_message(alice):
    task = await queued_task(alice)
    run = await claim(task)
    for word in ("a", "b", "c", "d"):
        await persist_delta(run, word)
    comm = communicator(task.pk, cookie=await session_cookie(alice), after=0)
    assert (await comm.connect())[0]
    message = await comm.receive_from(timeout=5)
    assert int(BATCH_SEQ.search(message)[1]) == 5
    assert [text for _, text in deltas([message])] == ["a", "b", "c", "d"]
    assert '<template data-attempt-start data-seq="1" data-attempt="1">' in message
    assert 'data-task-status="running"' in message
    await comm.disconnect()


async def test_a_finished_task_with_nothing_after_seq_closes_at_once(alice):
    task = await queued_task(alice)
    run = await claim(task)
    await persist_success(run)
    comm = communicator(task.pk, cookie=await session_cookie(alice), after=3)
    assert (await comm.connect())[0]
    assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 1000}
    await comm.disconnect()


async def test_a_new_attempt_is_announced(alice):
    task = await queued_task(alice)
    first = await claim(task)
    await persist_delta(first, "first try")

    @sync_to_async
    def requeue_and_claim_again():
        Task.objects.transition(task.pk, Status.RUNNING, Status.QUEUED, expect_epoch=first.epoch)
        return leases.claim_next_task("test-worker")

    comm = communicator(task.pk, cookie=await session_cookie(alice), after=2)
    assert (await comm.connect())[0]
    second = await requeue_and_claim_again()  # seq 3 queued, seq 4 running attempt 2
    await broadcast.publish(second.events)
    messages = await receive_until_seq(comm, 4)
    assert '<template data-attempt-start data-seq="4" data-attempt="2">' in "".join(messages)
    await comm.disconnect()


async def test_a_queued_task_gets_its_place_in_line(alice, settings):
    settings.REPORTS_POLL_S = 0.05
    task = await queued_task(alice)
    comm = communicator(task.pk, cookie=await session_cookie(alice))
    assert (await comm.connect())[0]
    message = await comm.receive_from(timeout=5)  # a refresh: no events, the same seq
    assert BATCH_SEQ.search(message)[1] == "0"
    assert 'data-task-status="queued"' in message and "next in line" in message
    await comm.disconnect()


async def test_a_silent_running_task_still_sends_a_heartbeat(alice, settings, monkeypatch):
    """A page counts a silent socket as dead: one that carries no event still speaks."""
    from reports.streaming import consumers

    settings.REPORTS_POLL_S = 0.05
    monkeypatch.setattr(consumers, "HEARTBEAT_S", 0.2)
    task = await queued_task(alice)
    await claim(task)  # seq 1: running; then nothing more is written
    comm = communicator(task.pk, cookie=await session_cookie(alice), after=1)
    assert (await comm.connect())[0]
    message = await comm.receive_from(timeout=5)
    assert message == '<template data-batch data-seq="1"></template>'
    assert await comm.receive_from(timeout=5) == message  # and again, while it stays silent
    await comm.disconnect()
