"""The live stream over the real ASGI application: who may connect, and what they get."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session
from django.db import connections
from django.db.models import F
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from project.asgi import application
from reports import events, presentation, threads
from reports.models import ApiToken, Status, Task, TaskEvent
from reports.streaming import broadcast, consumers, credentials, follower
from reports.worker import leases
from tests.helpers import queries_of_the_streams, submit, task_of

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1")
QUERIES_PER_CONNECT = 9
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
    event, _ = Task.objects.append_event(claim.task_id, claim.epoch, events.delta(text))
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
        event=events.succeeded(uuid.uuid4()),
        report_html="<h1>Done</h1>",
    )


def communicator(task_id, *, cookie: bytes | None, origin=ORIGIN, after: int | None = 0):
    path = f"/ws/tasks/{task_id}/" + (f"?after={after}" if after is not None else "")
    headers = [(b"host", b"127.0.0.1"), *([origin] if origin else [])]
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


async def receive_until_closed(comm: WebsocketCommunicator) -> tuple[list[str], dict]:
    """Receive messages until the server closes; return them and the close."""
    messages = []
    while True:
        output = await comm.receive_output(timeout=5)
        if output["type"] == "websocket.close":
            return messages, output
        messages.append(output["text"])


def deltas(messages: list[str]) -> list[tuple[int, str]]:
    return [(int(s), text) for m in messages for s, _, text in DELTA.findall(m)]


async def test_owner_is_accepted(alice):
    task = await queued_task(alice)
    comm = communicator(task.pk, cookie=await session_cookie(alice))
    connected, _ = await comm.connect()
    assert connected
    await comm.disconnect()


async def test_a_page_read_that_hangs_holds_no_other_page_up(alice, settings):
    """The pages' reads run side by side: one that hangs (a slow query, a database under
    load) keeps no other page from opening and following its task. On one thread, every
    page of the process queued behind it (with 800 streams on PostgreSQL, for seconds)."""
    settings.REPORTS_POLL_S = 0.05  # the delta below is not fanned out: the poll reads it
    task = await queued_task(alice)
    run = await claim(task)
    release = threading.Event()
    held = asyncio.ensure_future(threads.on_page_reads(release.wait)(30))
    try:
        comm = communicator(task.pk, cookie=await session_cookie(alice))
        assert (await comm.connect(timeout=5))[0]
        await persist_delta(run, "while another read hangs")
        assert (2, "while another read hangs") in deltas(await receive_until_seq(comm, 2))
        assert not held.done()  # the other read was held all along
        await comm.disconnect()
    finally:
        release.set()
        await held


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


async def test_the_owners_api_token_does_not_open_the_page_socket(alice):
    """docs/api.md: the socket is the page's, let in by its session alone; a script with
    a token follows the event stream."""
    task = await queued_task(alice)
    token = await sync_to_async(ApiToken.objects.issue)(alice, label="script")
    comm = communicator(task.pk, cookie=None)
    comm.scope["headers"].append((b"authorization", f"Bearer {token}".encode()))
    await refused(comm)


async def test_a_session_logged_out_by_a_password_change_is_refused(alice):
    task = await queued_task(alice)
    cookie = await session_cookie(alice)
    alice.set_password("a new one")
    await sync_to_async(alice.save)()
    await refused(communicator(task.pk, cookie=cookie))


async def test_a_session_signed_with_a_fallback_key_is_accepted_and_kept(alice, settings):
    """After a key rotation the page still streams; its session is left for the next
    page load to rotate (a socket cannot send the browser a new cookie)."""
    task = await queued_task(alice)
    cookie = await session_cookie(alice)
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a rotated key, long enough for Django's checks " * 2
    comm = communicator(task.pk, cookie=cookie)  # its hash is the fallback key's
    assert (await comm.connect())[0]
    await comm.disconnect()
    session_key = cookie.decode().partition("=")[2]
    assert await sync_to_async(Session.objects.filter(session_key=session_key).exists)()


async def test_a_session_beside_a_cookie_the_standard_parser_rejects_is_accepted(alice):
    """Browsers send every cookie of the host; one another app set in a shape Python's
    own cookie parser gives up on must not hide the session (pages read it alike)."""
    task = await queued_task(alice)
    session = await session_cookie(alice)
    comm = communicator(task.pk, cookie=b'prefs={"a":1}; theme="dark; ' + session)
    assert (await comm.connect())[0]
    await comm.disconnect()


@pytest.mark.parametrize(
    "cookie", [b"sessionid=no-such-session", b"sessionid", b"other=1", b"sessionid=abc\x00defghij"]
)
async def test_a_cookie_naming_no_session_is_refused(alice, cookie):
    task = await queued_task(alice)
    await refused(communicator(task.pk, cookie=cookie))


async def test_another_socket_path_is_refused(alice):
    task = await queued_task(alice)
    cookie = await session_cookie(alice)
    headers = [(b"host", b"127.0.0.1"), ORIGIN, (b"cookie", cookie)]
    path = f"/ws/tasks/{task.pk}/more/"
    await refused(WebsocketCommunicator(application, path, headers=headers))


async def test_foreign_origin_is_refused(alice):
    task = await queued_task(alice)
    cookie = await session_cookie(alice)
    await refused(communicator(task.pk, cookie=cookie, origin=(b"origin", b"https://evil.test")))


@pytest.mark.parametrize(
    "task_id", ["not-a-uuid", pytest.param(str(uuid.uuid4()), id="unknown-task")]
)
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
    final, closed = await receive_until_closed(comm)
    text = "".join(final)
    assert 'data-task-status="succeeded"' in text
    assert 'hx-swap-oob="true"' in text
    assert "<h2>Done</h2>" in text and "data-download" in text  # under the page's h1
    assert deltas(final) == []
    assert {int(BATCH_SEQ.search(m)[1]) for m in final} == {8}
    assert closed == {"type": "websocket.close", "code": 1000}
    await comm.disconnect()


async def test_a_page_gone_while_its_text_is_sent_is_not_logged_as_a_failure(alice, caplog):
    """A tab closed mid-stream makes the server's send raise (uvicorn's
    ClientDisconnected is an OSError): that is a page leaving, not an error to alert on."""
    task = await queued_task(alice)
    run = await claim(task)
    gone, raised = asyncio.Event(), asyncio.Event()

    async def server(scope, receive, send):
        async def send_or_gone(message):
            if message["type"] == "websocket.send" and gone.is_set():
                raised.set()
                raise OSError("the client went")
            await send(message)

        await application(scope, receive, send_or_gone)

    path = f"/ws/tasks/{task.pk}/?after=0"
    headers = [(b"host", b"127.0.0.1"), ORIGIN, (b"cookie", await session_cookie(alice))]
    comm = WebsocketCommunicator(server, path, headers=headers)
    connected, _ = await comm.connect()
    assert connected
    await receive_until_seq(comm, 1)

    gone.set()
    await broadcast.publish([await persist_delta(run, "Hello")])
    await asyncio.wait_for(raised.wait(), timeout=5)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
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
    status = await comm.receive_from(timeout=5)  # the status line follows the text
    assert int(BATCH_SEQ.search(status)[1]) == 5
    assert 'data-task-status="running"' in status
    await comm.disconnect()


async def test_text_reaches_the_page_as_a_reader_sees_it_and_as_the_snapshot_has_it(alice):
    # The model's Markdown escapes are undone on the server, per delta: the page shows
    # "1. *not* a list" whether it reads the stream or loads the snapshot.
    task = await queued_task(alice)
    run = await claim(task)
    await persist_delta(run, "1\\. \\*not\\* ")
    await persist_delta(run, "a list \\\\ with a backslash")
    comm = communicator(task.pk, cookie=await session_cookie(alice), after=0)
    assert (await comm.connect())[0]
    streamed = "".join(text for _, text in deltas([await comm.receive_from(timeout=5)]))
    assert streamed == "1. *not* a list \\ with a backslash"
    await comm.disconnect()
    task = await sync_to_async(Task.objects.get)(pk=task.pk)
    page = await sync_to_async(presentation.page_context)(task)
    assert page["snapshot"].text == streamed


async def test_a_finished_task_with_nothing_after_seq_closes_at_once(alice):
    task = await queued_task(alice)
    run = await claim(task)
    await persist_success(run)
    comm = communicator(task.pk, cookie=await session_cookie(alice), after=3)
    assert (await comm.connect())[0]
    assert await comm.receive_output(timeout=5) == {"type": "websocket.close", "code": 1000}
    await comm.disconnect()


@pytest.mark.parametrize("after", ["100000", "9" * 5000])
async def test_a_resume_point_past_the_end_of_a_running_task_still_closes_at_its_end(
    alice, settings, after
):
    """No event past the last exists: the page goes on from the last one, gets the end,
    and the socket closes, giving its user's stream slot back."""
    settings.REPORTS_MAX_STREAMS_PER_USER = 1
    task = await queued_task(alice)
    run = await claim(task)
    await persist_delta(run, "seen")
    cookie = await session_cookie(alice)
    comm = communicator(task.pk, cookie=cookie, after=after)
    assert (await comm.connect())[0]
    later = await persist_delta(run, "later")
    await broadcast.publish([later])
    end = await persist_success(run)
    await broadcast.publish([end])
    messages, closed = await receive_until_closed(comm)
    assert closed["code"] == 1000
    assert deltas(messages) == [(3, "later")]
    assert 'data-task-status="succeeded"' in "".join(messages)
    await comm.disconnect()
    again = communicator(task.pk, cookie=cookie, after=4)
    assert (await again.connect())[0]  # the slot is free again
    await again.disconnect()


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


async def test_a_page_opened_while_the_task_ran_says_why_it_waits_for_a_retry(alice):
    task = await queued_task(alice)
    first = await claim(task)  # seq 1: running, attempt 1
    comm = communicator(task.pk, cookie=await session_cookie(alice), after=1)
    assert (await comm.connect())[0]  # its copy of the task says "running"

    @sync_to_async
    def requeue_for_a_rate_limit():
        return Task.objects.transition(
            task.pk,
            Status.RUNNING,
            Status.QUEUED,
            expect_epoch=first.epoch,
            event=events.requeued(retry_after_s=2, reason="rate_limited"),
        )

    await broadcast.publish([await requeue_for_a_rate_limit()])  # seq 2
    status = await comm.receive_from(timeout=5)
    while 'id="task-status"' not in status:  # the text goes first, the status line after
        status = await comm.receive_from(timeout=5)
    assert 'data-task-status="queued"' in status
    assert "trying again: the provider asked us to wait 2 s; next in line" in status
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


def test_a_moving_queue_reads_what_its_pages_share_once_not_once_a_page(alice, bob):
    """A queued page's line is sent again each time its place moves. What every queued
    line of the lane reads alike (the provider's circuit, the wait a place, an owner's
    reports running ahead) is read once for all of them, and the lines say the same."""
    alices, bobs = Client(), Client()
    alices.force_login(alice)
    bobs.force_login(bob)
    done = task_of(submit(alices))
    Task.objects.filter(pk=done.pk).update(
        status=Status.SUCCEEDED,
        claimed_at=F("created_at"),
        finished_at=F("created_at") + timedelta(seconds=40),
    )
    queued = [task_of(submit(alices)) for _ in range(5)] + [task_of(submit(bobs))]
    state = events.fold([events.Event("t", 1, "status", events.status(Status.QUEUED).stamped(0))])

    with CaptureQueriesContext(connections["default"]) as opened:
        first = [consumers.status_message(task.pk, state, 1) for task in queued]
    with CaptureQueriesContext(connections["default"]) as moved:
        again = [
            consumers.status_message(task.pk, state, 1, place=place)
            for place, task in enumerate(queued, 1)
        ]

    assert again == first and "6th in line, estimated wait" in again[-1]
    # A line opened reads its task, its place and what it shares; a line moved, its task.
    shared = len(opened) // len(queued) - 2
    assert shared >= 3 and len(opened) == len(queued) * (2 + shared)
    # Each read once: bob's reports running ahead are his own question.
    assert len(moved) == len(queued) + shared + 1


async def test_a_user_over_the_cap_of_open_streams_is_refused_at_the_handshake(alice, settings):
    settings.REPORTS_MAX_STREAMS_PER_USER = 2
    task = await queued_task(alice)
    cookie = await session_cookie(alice)
    held = [communicator(task.pk, cookie=cookie) for _ in range(2)]
    for comm in held:
        assert (await comm.connect())[0]

    await refused(communicator(task.pk, cookie=cookie))

    await held[0].disconnect()  # a closed page gives its place back
    again = communicator(task.pk, cookie=cookie)
    assert (await again.connect())[0]
    for comm in (again, held[1]):
        await comm.disconnect()


async def test_idle_pages_hold_no_asyncio_task_of_their_own(alice, settings):
    settings.REPORTS_POLL_S = 0.05
    task = await queued_task(alice)
    cookie = await session_cookie(alice)
    before = len(asyncio.all_tasks())
    pages = [communicator(task.pk, cookie=cookie) for _ in range(20)]
    for comm in pages:
        assert (await comm.connect())[0]
        assert "next in line" in await comm.receive_from(timeout=5)

    # Each connection is what Channels runs for it (the application, its wait for the
    # client) and nothing more; the task's feed (its layer listener, the process's
    # poller) is shared by all twenty.
    running = Counter(t.get_coro().__qualname__ for t in asyncio.all_tasks())
    # (An in-process layer reaches no other process: its feeds hear the worker directly.)
    assert running["Feed._listen"] == (1 if follower.layer_across_processes() else 0)
    assert running["Hub._poll"] == 1
    assert running["_Heartbeats._tick"] <= 1  # one ticker for every open page
    assert running["_Rechecks._tick"] <= 1  # one check of every open stream's session
    assert not [name for name in running if name.startswith("TaskConsumer")]
    # nor a finished one: its send over, a page keeps no done task and its coroutine
    open_pages = list(consumers._heartbeats.consumers)
    assert len(open_pages) == len(pages)
    for _ in range(500):  # the last sends end as the loop runs on
        if all(page.sending is None for page in open_pages):
            break
        await asyncio.sleep(0.01)
    assert [page.sending for page in open_pages] == [None] * len(pages)
    # Besides the pages: the feed's listener, the poller, the two tickers and the layer's
    # receiver. A task of the moment (a tick's write under way on a busy machine) ends as
    # the loop runs on; one a page kept would not.
    allowed = 2 * len(pages) + 5
    for _ in range(500):
        if len(asyncio.all_tasks()) - before <= allowed:
            break
        await asyncio.sleep(0.01)
    assert len(asyncio.all_tasks()) - before <= allowed
    for comm in pages:
        await comm.disconnect()


async def test_an_open_page_outlives_a_redis_outage_and_keeps_streaming(
    alice, settings, private_redis
):
    settings.REPORTS_POLL_S = 0.05
    task = await queued_task(alice)
    run = await claim(task)  # seq 1
    comm = communicator(task.pk, cookie=await session_cookie(alice), after=1)
    assert (await comm.connect())[0]
    live = await persist_delta(run, "before ")  # seq 2, fanned out through Redis
    await broadcast.publish([live])
    assert deltas(await receive_until_seq(comm, 2)) == [(2, "before ")]

    await asyncio.to_thread(private_redis.stop)
    await persist_delta(run, "during")  # seq 3: in the table; no layer to carry it

    assert deltas(await receive_until_seq(comm, 3)) == [(3, "during")]
    await persist_success(run)  # seq 4 finalizing, seq 5 succeeded
    final, closed = await receive_until_closed(comm)
    assert 'data-task-status="succeeded"' in "".join(final)
    assert closed == {"type": "websocket.close", "code": 1000}
    await comm.disconnect()


async def test_a_finished_stream_leaves_no_subscription_in_redis(alice, settings, private_redis):
    # A web process runs for weeks: what a page subscribed to must go when the page does.
    settings.REPORTS_POLL_S = 60
    task = await queued_task(alice)
    run = await claim(task)  # seq 1
    comm = communicator(task.pk, cookie=await session_cookie(alice), after=1)
    assert (await comm.connect())[0]
    # The feed's channel and its task's group:
    assert len(await subscriptions_when(private_redis, lambda found: len(found) == 2)) == 2
    await persist_success(run)  # seq 2 finalizing, seq 3 succeeded
    # The end reaches the page through Redis only (no poll meanwhile, nothing handed over).
    ended = await sync_to_async(list)(TaskEvent.objects.filter(task_id=task.pk, seq__gt=1))
    message = {"type": "task.events", "events": [e.as_event().as_row() for e in ended]}
    await follower.layer_across_processes().group_send(follower.group_name(task.pk), message)
    await receive_until_closed(comm)
    await comm.disconnect()  # the last page of the task: its feed stops
    stopping = [t for t in follower.hub().tasks if t.get_coro().__qualname__ == "Feed.stop"]
    await asyncio.gather(*stopping)
    assert await subscriptions_when(private_redis, lambda found: not found) == []


async def subscriptions_when(redis_server, done, attempts: int = 100) -> list[bytes]:
    """Redis's subscriptions once `done(them)`, asked again for up to a second: a SUBSCRIBE
    or UNSUBSCRIBE sent on one connection may reach Redis after a question on another."""
    for _ in range(attempts):
        found = await asyncio.to_thread(redis_server.subscriptions)
        if done(found):
            break
        await asyncio.sleep(0.01)
    return found


async def test_a_connect_runs_a_fixed_number_of_queries_however_long_the_replay(alice, settings):
    settings.REPORTS_POLL_S = 60  # no poll of the table meanwhile
    task = await queued_task(alice)
    run = await claim(task)
    for word in ("a",) * 30:
        await persist_delta(run, word)
    cookie = await session_cookie(alice)
    comm = communicator(task.pk, cookie=cookie)

    # session, user, the task, its status, the feed's start, the replay (status, events),
    # the status line (the task as it is now, the attempt's elapsed time)
    async with queries_of_the_streams() as queries:
        assert (await comm.connect())[0]
        assert len(deltas(await receive_until_seq(comm, 31))) == 30
    await comm.disconnect()
    assert 3 <= len(queries) <= QUERIES_PER_CONNECT, [q["sql"] for q in queries.captured_queries]


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


# --- a session that ends while its page is open ---------------------------------------------


@sync_to_async
def logged_in(user) -> tuple[Client, bytes]:
    """A browser of its own, logged in: its client (to log out, change the password) and
    its session cookie."""
    client = Client()
    client.force_login(user)
    return client, f"sessionid={client.cookies['sessionid'].value}".encode()


async def live_page(task: Task, cookie: bytes) -> WebsocketCommunicator:
    """A page open on a running task (seq 1), its replay received: from then on its
    session is checked with the others'."""
    comm = communicator(task.pk, cookie=cookie, after=0)
    assert (await comm.connect())[0]
    await receive_until_seq(comm, 1)  # the replay's text
    assert 'data-task-status="running"' in await comm.receive_from(timeout=5)  # its status
    return comm


async def still_streaming(comm: WebsocketCommunicator, run: leases.Claim, text: str) -> None:
    """The socket is open and carries what the task writes next."""
    live = await persist_delta(run, text)
    await broadcast.publish([live])
    assert (live.seq, text) in deltas(await receive_until_seq(comm, live.seq))


async def signed_out(comm: WebsocketCommunicator) -> None:
    """The server closes the socket with the code that stops the page reconnecting."""
    assert await comm.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": consumers.SIGNED_OUT,
    }
    await comm.disconnect()


async def test_a_page_closes_after_its_session_logs_out_while_others_go_on(
    alice, bob, settings, monkeypatch
):
    """A logout in another tab ends the page's stream at the next check (the ticker's,
    its interval made short here); the same user's other session and another user's
    page go on."""
    settings.REPORTS_POLL_S = 60
    monkeypatch.setattr(credentials, "RECHECK_S", 0.05)
    task, bobs_task = await queued_task(alice), await queued_task(bob)
    run = await claim(task)
    await claim(bobs_task)
    leaving, leaving_cookie = await logged_in(alice)
    leaving_page = await live_page(task, leaving_cookie)
    staying_page = await live_page(task, (await logged_in(alice))[1])
    bobs_page = await live_page(bobs_task, await session_cookie(bob))

    await sync_to_async(leaving.logout)()  # its session is flushed from the table
    await signed_out(leaving_page)

    await credentials.check_now()  # one check more, after the one that closed it
    await still_streaming(staying_page, run, "still here")
    assert await bobs_page.receive_nothing(timeout=0.1)  # open: no close came
    for comm in (staying_page, bobs_page):
        await comm.disconnect()


@pytest.mark.parametrize("how", ["deleted", "expired", "deactivated"])
async def test_a_page_closes_once_its_session_is_deleted_or_expires_or_its_user_is_off(
    alice, settings, how
):
    settings.REPORTS_POLL_S = 60
    settings.REPORTS_MAX_STREAMS_PER_USER = 1
    task = await queued_task(alice)
    await claim(task)
    cookie = await session_cookie(alice)
    comm = await live_page(task, cookie)
    await credentials.check_now()
    assert await comm.receive_nothing(timeout=0.1)  # a session that holds: nothing happens

    sessions = Session.objects.filter(session_key=cookie.decode().partition("=")[2])
    if how == "deleted":  # an admin deleting sessions
        await sync_to_async(sessions.delete)()
    elif how == "expired":
        await sync_to_async(sessions.update)(expire_date=timezone.now())
    else:
        alice.is_active = False
        await sync_to_async(alice.save)()
    await credentials.check_now()
    await signed_out(comm)
    if how != "deactivated":  # its stream slot was given back: a new session may open one
        again = communicator(task.pk, cookie=await session_cookie(alice), after=1)
        assert (await again.connect())[0]
        await again.disconnect()


async def test_a_password_change_closes_the_pages_of_the_sessions_it_ended(alice, settings):
    """As Django logs a request out: a password change ends every other session (their
    hash of the password no longer holds). The browser where it was changed keeps its
    session under a new key, so its page's socket closes too, and a new one opens with
    the new cookie (the page asks, then reconnects: docs/pages.md)."""
    settings.REPORTS_POLL_S = 60
    task = await queued_task(alice)
    run = await claim(task)
    changer, changer_cookie = await logged_in(alice)
    other_cookie = (await logged_in(alice))[1]
    own, other = await live_page(task, changer_cookie), await live_page(task, other_cookie)

    answer = await sync_to_async(changer.post)(
        "/accounts/password_change/",
        {
            "old_password": "alice-pass",
            "new_password1": "a new long passphrase",
            "new_password2": "a new long passphrase",
        },
    )
    assert answer.status_code == 302, answer.content
    await credentials.check_now()
    await signed_out(other)
    await signed_out(own)  # its key was renewed

    renewed = f"sessionid={changer.cookies['sessionid'].value}".encode()
    assert renewed != changer_cookie
    again = await live_page(task, renewed)
    await credentials.check_now()
    await still_streaming(again, run, "after the change")
    await again.disconnect()
    await refused(communicator(task.pk, cookie=other_cookie))


async def test_a_check_of_the_pages_sessions_runs_the_same_queries_however_many_are_open(
    alice, bob, settings, monkeypatch
):
    settings.REPORTS_POLL_S = 60
    task, bobs_task = await queued_task(alice), await queued_task(bob)
    await claim(task)
    await claim(bobs_task)
    read = credentials.read
    checks = []

    def counted(round_):
        with CaptureQueriesContext(connections["default"]) as queries:
            found = read(round_)
        checks.append([q["sql"] for q in queries.captured_queries])
        return found

    monkeypatch.setattr(credentials, "read", counted)
    pages = [await live_page(task, await session_cookie(alice))]
    await credentials.check_now()
    for n in range(11):
        owner, owned = (alice, task) if n % 2 else (bob, bobs_task)
        pages.append(await live_page(owned, await session_cookie(owner)))
    await credentials.check_now()

    one, twelve = checks
    # the sessions, then their users: one query each, whatever their number
    assert len(one) == len(twelve) == 2, twelve
    for comm in pages:
        assert await comm.receive_nothing(timeout=0.01)  # every one still open
        await comm.disconnect()
