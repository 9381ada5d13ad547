"""GET /api/tasks/<id>/events, docs/api.md: the text/event-stream a script or a page follows.

Every wait here waits on data (with a generous timeout only to fail instead of hanging).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from io import StringIO

import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.management import call_command
from django.db import connection
from django.test import AsyncClient
from django.test.utils import CaptureQueriesContext

from reports import events, lifecycle
from reports.models import TERMINAL, ApiToken, Status, Task, TaskEvent
from reports.models.tasks import TaskEventQuerySet
from reports.serving.handler import RequestThread
from reports.streaming import broadcast, credentials, sse
from reports.worker.leases import Claim, claim_next_task
from tests.helpers import queries_of_the_streams, report_body, saved_report

db = sync_to_async
# A finished task has events enough to resume from anywhere in them.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("writes_in_step")]

WAIT_S = 10.0  # only ever reached when the stream misbehaves


@dataclass(frozen=True)
class SSE:
    id: int
    event: str
    data: dict


class Stream:
    """Read a streaming response as SSE events; keep-alive comments are kept apart."""

    def __init__(self, response) -> None:
        self.response = response
        self.chunks = aiter(response.streaming_content)
        self.buffer = ""
        self.comments: list[str] = []
        self.closed = False

    async def next(self) -> SSE | None:
        """Return the next event, or None once the server closed the stream."""
        while True:
            while "\n\n" not in self.buffer:
                try:
                    chunk = await asyncio.wait_for(anext(self.chunks), WAIT_S)
                except StopAsyncIteration:
                    self.closed = True
                    assert self.buffer == "", f"a torn event at the end: {self.buffer!r}"
                    return None
                self.buffer += chunk.decode()
            block, self.buffer = self.buffer.split("\n\n", 1)
            fields: dict[str, str] = {}
            for line in block.split("\n"):
                if line.startswith(":"):
                    self.comments.append(line)
                    continue
                name, _, value = line.partition(": ")
                assert name in {"id", "event", "data"} and name not in fields, block
                fields[name] = value
            if fields:
                assert set(fields) == {"id", "event", "data"}, block
                return SSE(int(fields["id"]), fields["event"], json.loads(fields["data"]))

    async def rest(self) -> list[SSE]:
        """Read every event up to the end of the stream."""
        events = []
        while (event := await self.next()) is not None:
            events.append(event)
        return events

    async def close(self) -> None:
        """Close the stream as a server does when its client goes: the body, then the
        response."""
        if not self.closed:
            await self.chunks.aclose()
        self.response.close()


@pytest.fixture
async def alice_async(alice) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(alice)
    return client


async def follow(client: AsyncClient, task_id, query: str = "", **headers) -> Stream:
    response = await client.get(f"/api/tasks/{task_id}/events{query}", headers=headers)
    assert response.status_code == 200, response.content
    return Stream(response)


async def finished(make_task, worker, scenario: str = "ok") -> Task:
    task = await db(make_task)(scenario=scenario)
    while await worker.claim_and_start():
        await worker.wait_for_attempts()
    await worker.wait_for_attempts()
    return await db(Task.objects.get)(pk=task.pk)


def as_triples(events: list[SSE]) -> list[tuple[int, str, dict]]:
    return [(e.id, e.event, e.data) for e in events]


@db
def stored_events(task: Task) -> list[tuple[int, str, dict]]:
    return [(e.seq, e.type, e.data) for e in TaskEvent.objects.filter(task=task).order_by("seq")]


# --- a finished task ----------------------------------------------------------------------


async def test_a_finished_task_streams_every_event_once_in_order_then_closes(
    alice_async, make_task, worker
):
    task = await finished(make_task, worker)
    response = await alice_async.get(f"/api/tasks/{task.pk}/events")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["Cache-Control"] == "no-cache, no-store, private"
    assert response["X-Accel-Buffering"] == "no"
    events = await Stream(response).rest()

    assert [e.id for e in events] == list(range(1, task.last_seq + 1))
    assert as_triples(events) == await stored_events(task)
    types = [e.event for e in events]
    assert "status" in types and "delta" in types
    assert [t for t in types if t in TERMINAL] == ["succeeded"]
    assert types[-1] == "succeeded"
    assert events[-1].data["result_id"] == str(task.result_id)
    for event in events:
        if event.event == "status":
            assert set(event.data) >= {"status", "attempt"}
        if event.event == "delta":
            assert isinstance(event.data["text"], str) and event.data["attempt"] == 1
    report = await db(saved_report)(task)
    assert "".join(e.data["text"] for e in events if e.event == "delta").rstrip() == report_body(
        report
    )


async def test_a_failed_task_ends_with_one_failed_event_carrying_its_error(
    alice_async, make_task, worker
):
    task = await finished(make_task, worker, scenario="truncated")
    events = await (await follow(alice_async, task.pk)).rest()

    assert [e.id for e in events] == list(range(1, len(events) + 1))
    assert [e.event for e in events if e.event in TERMINAL] == ["failed"]
    terminal = events[-1]
    assert terminal.event == "failed"
    assert terminal.data["error_type"] == "stream_truncated"
    assert terminal.data["partial"] is True
    assert any(e.event == "delta" for e in events)


async def test_a_cancelled_queued_task_streams_its_one_cancelled_event(alice_async, make_task):
    task = await db(make_task)()
    assert await db(lambda: lifecycle.cancel_task(Task.objects.get(pk=task.pk)))()

    events = await (await follow(alice_async, task.pk)).rest()

    assert [(e.id, e.event, e.data["partial"]) for e in events] == [(1, "cancelled", False)]


# --- resuming -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "headers", "first"),
    [
        ("?after=3", {}, 4),
        ("", {"Last-Event-ID": "3"}, 4),
        ("?after=1", {"Last-Event-ID": "5"}, 6),
        ("?after=5", {"Last-Event-ID": "1"}, 2),
        ("?after=0", {}, 1),
    ],
    ids=["after", "last-event-id", "header-wins-later", "header-wins-earlier", "after-zero"],
)
async def test_resuming_sends_exactly_the_events_after_the_resume_point(
    alice_async, make_task, worker, query, headers, first
):
    task = await finished(make_task, worker)
    events = await (await follow(alice_async, task.pk, query, **headers)).rest()

    assert [e.id for e in events] == list(range(first, task.last_seq + 1))
    assert as_triples(events) == (await stored_events(task))[first - 1 :]


# At the end, past it, or past it by a number of thousands of digits, too long for int().
@pytest.mark.parametrize("past", [0, 1, 100, "9" * 5000], ids=["0", "1", "100", "huge"])
@pytest.mark.parametrize("resume", ["after", "Last-Event-ID"])
async def test_resuming_at_or_past_the_end_of_a_finished_task_answers_204(
    alice_async, make_task, worker, past, resume
):
    """204 No Content is what makes a browser's EventSource stop reconnecting."""
    task = await finished(make_task, worker)
    point = str(task.last_seq + past) if isinstance(past, int) else past
    if resume == "after":
        response = await alice_async.get(f"/api/tasks/{task.pk}/events?after={point}")
    else:
        response = await alice_async.get(
            f"/api/tasks/{task.pk}/events", headers={"Last-Event-ID": point}
        )
    assert response.status_code == 204
    assert response.content == b""


@pytest.mark.parametrize(
    ("query", "headers"),
    [
        ("?after=abc", {}),
        ("?after=-1", {}),
        ("?after=1.5", {}),
        ("?after=", {}),
        ("?after=%C2%B2", {}),  # a superscript two: a digit to str.isdigit, not an integer
        ("", {"Last-Event-ID": "abc"}),
        ("?after=2", {"Last-Event-ID": "-1"}),
    ],
)
async def test_a_resume_point_that_is_not_a_non_negative_integer_is_400(
    alice_async, make_task, query, headers
):
    task = await db(make_task)()
    response = await alice_async.get(f"/api/tasks/{task.pk}/events{query}", headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


async def test_the_stream_needs_credentials_and_ownership(make_task, bob):
    task = await db(make_task)()
    anonymous = await AsyncClient().get(f"/api/tasks/{task.pk}/events")
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"] == "Bearer"
    client = AsyncClient()
    await client.aforce_login(bob)
    foreign = await client.get(f"/api/tasks/{task.pk}/events")
    assert foreign.status_code == 404
    assert foreign.json() == {"error": {"code": "not_found", "message": "No such task."}}


# --- following a running task ---------------------------------------------------------------


@db
def claim(task: Task) -> Claim:
    found = claim_next_task("sse-test-worker")
    assert found is not None and found.task_id == task.pk
    return found


@db
def append(claim: Claim, text: str):
    event, _ = Task.objects.append_event(claim.task_id, claim.epoch, events.delta(text))
    return event


def fail_now(claim: Claim):
    return Task.objects.transition(
        claim.task_id,
        Status.RUNNING,
        Status.FAILED,
        expect_epoch=claim.epoch,
        event=events.failed("provider_error", "", partial=True),
        error_type="provider_error",
        user_message="The provider disconnected.",
    )


fail = db(fail_now)


async def test_a_live_stream_fills_a_dropped_message_from_the_table_without_gap_or_repeat(
    alice_async, make_task, settings
):
    # No table poll within the test's patience: only the published events wake the stream.
    settings.REPORTS_POLL_S = 60
    task = await db(make_task)()
    running = await claim(task)
    stream = await follow(alice_async, task.pk)

    first = await stream.next()
    assert (first.id, first.event, first.data["status"]) == (1, "status", "running")

    hello = await append(running, "Hello ")
    await broadcast.publish([hello])
    assert await stream.next() == SSE(2, "delta", {"text": "Hello ", "attempt": 1})

    await append(running, "brave ")  # committed, but its layer message is lost
    world = await append(running, "world")
    await broadcast.publish([world])
    assert await stream.next() == SSE(3, "delta", {"text": "brave ", "attempt": 1})
    assert await stream.next() == SSE(4, "delta", {"text": "world", "attempt": 1})

    await broadcast.publish([hello, world])  # late duplicates of what was sent
    terminal = await fail(running)
    await broadcast.publish([terminal])
    last = await stream.next()
    assert (last.id, last.event) == (5, "failed")
    assert last.data["error_type"] == "provider_error" and last.data["partial"] is True
    assert await stream.next() is None  # the stream closes after the terminal event


async def test_a_live_stream_follows_a_writer_whose_messages_never_arrive(
    alice_async, make_task, settings
):
    settings.REPORTS_POLL_S = 0.05  # the table poll is the only way to learn of new events
    task = await db(make_task)()
    running = await claim(task)
    stream = await follow(alice_async, task.pk)
    assert (await stream.next()).id == 1

    for i, text in enumerate(["one ", "two ", "three"], start=2):
        await append(running, text)
        assert await stream.next() == SSE(i, "delta", {"text": text, "attempt": 1})
    await fail(running)

    rest = await stream.rest()
    assert [(e.id, e.event) for e in rest] == [(5, "failed")]


async def test_a_task_that_ends_just_as_the_stream_reads_the_table_still_sends_its_end(
    alice_async, make_task, settings, monkeypatch
):
    settings.REPORTS_POLL_S = 0.05
    task = await db(make_task)()
    running = await claim(task)
    read_events = TaskEventQuerySet.as_events
    finished_at_read = []

    def read_while_the_worker_finishes(self):
        # The worker commits the terminal status and event right after the stream
        # fetched the events and before it asks whether the task has ended.
        events = read_events(self)
        if not finished_at_read:
            finished_at_read.append(fail_now(running))
        return events

    monkeypatch.setattr(TaskEventQuerySet, "as_events", read_while_the_worker_finishes)
    events = await (await follow(alice_async, task.pk)).rest()

    assert finished_at_read
    assert [(e.id, e.event) for e in events] == [(1, "status"), (2, "failed")]


async def test_a_stream_resumed_on_a_running_task_continues_live(alice_async, make_task, settings):
    settings.REPORTS_POLL_S = 60
    task = await db(make_task)()
    running = await claim(task)
    await append(running, "seen ")
    await append(running, "missed ")
    stream = await follow(alice_async, task.pk, "", **{"Last-Event-ID": "2"})

    assert await stream.next() == SSE(3, "delta", {"text": "missed ", "attempt": 1})
    later = await append(running, "later")
    await broadcast.publish([later])
    assert await stream.next() == SSE(4, "delta", {"text": "later", "attempt": 1})
    await broadcast.publish([await fail(running)])
    assert [e.event for e in await stream.rest()] == ["failed"]


@pytest.mark.parametrize("resume", [{"query": "?after=100000"}, {"Last-Event-ID": "100000"}])
async def test_a_resume_point_past_the_end_of_a_running_task_still_ends_with_the_task(
    alice_async, make_task, settings, resume
):
    """No event past the last exists: the stream goes on from the last one, sends the end,
    closes, and gives its user's stream slot back."""
    settings.REPORTS_POLL_S = 60
    settings.REPORTS_MAX_STREAMS_PER_USER = 1
    task = await db(make_task)()
    running = await claim(task)
    await append(running, "seen ")
    stream = await follow(alice_async, task.pk, resume.pop("query", ""), **resume)

    later = await append(running, "later")
    await broadcast.publish([later])
    assert await stream.next() == SSE(3, "delta", {"text": "later", "attempt": 1})
    await broadcast.publish([await fail(running)])
    assert [(e.id, e.event) for e in await stream.rest()] == [(4, "failed")]
    await stream.close()
    again = await follow(alice_async, task.pk)  # not 429: the slot is free again
    assert [e.event for e in await again.rest()][-1] == "failed"
    await again.close()


async def test_an_idle_stream_sends_keep_alive_comments_never_events(
    alice_async, make_task, settings, monkeypatch
):
    settings.REPORTS_POLL_S = 0.02
    monkeypatch.setattr(sse, "KEEPALIVE_S", 0.05)
    task = await db(make_task)()
    running = await claim(task)
    stream = await follow(alice_async, task.pk, "?after=1")

    raw = (await asyncio.wait_for(anext(stream.chunks), WAIT_S)).decode()
    assert raw == ": ping\n\n"  # the opening comment
    while ": ping" not in raw[len(": ping\n\n") :]:
        raw += (await asyncio.wait_for(anext(stream.chunks), WAIT_S)).decode()
    assert "event:" not in raw and "id:" not in raw

    await append(running, "after the pause")
    assert await stream.next() == SSE(2, "delta", {"text": "after the pause", "attempt": 1})
    await stream.close()


class UnreachableLayer:
    """A channel layer whose server is down: every call fails."""

    async def new_channel(self, prefix="specific."):
        raise ConnectionError("layer down")

    async def group_add(self, group, channel):
        raise ConnectionError("layer down")

    async def group_send(self, group, message):
        raise ConnectionError("layer down")


async def test_with_the_channel_layer_down_the_stream_still_delivers_every_event(
    alice_async, make_task, settings, monkeypatch
):
    settings.REPORTS_POLL_S = 0.05
    monkeypatch.setattr("reports.streaming.follower.get_channel_layer", UnreachableLayer)
    task = await db(make_task)()
    running = await claim(task)
    stream = await follow(alice_async, task.pk)
    assert (await stream.next()).id == 1
    await append(running, "Hello")  # by a worker elsewhere: only the table can tell
    assert await stream.next() == SSE(2, "delta", {"text": "Hello", "attempt": 1})
    await fail(running)
    assert [(e.id, e.event) for e in await stream.rest()] == [(3, "failed")]


async def test_the_headers_go_out_at_once_for_a_task_with_nothing_to_send(
    alice_async, make_task, settings
):
    settings.REPORTS_POLL_S = 60
    task = await db(make_task)()
    stream = await follow(alice_async, task.pk, f"?after={task.last_seq}")

    # Long before the first keep-alive (15 s): a server that holds the headers until the
    # first body bytes (daphne) sends them now.
    assert await asyncio.wait_for(anext(stream.chunks), 2.0) == b": ping\n\n"
    await stream.close()


async def test_a_user_over_the_cap_of_open_streams_gets_429_and_others_are_not_affected(
    alice_async, bob, make_task, settings
):
    settings.REPORTS_MAX_STREAMS_PER_USER = 2
    settings.REPORTS_POLL_S = 60
    task = await db(make_task)()
    open_streams = [await follow(alice_async, task.pk) for _ in range(2)]
    for stream in open_streams:
        await anext(stream.chunks)  # the stream is open

    refused = await alice_async.get(f"/api/tasks/{task.pk}/events")
    assert refused.status_code == 429 and refused["Retry-After"]
    assert refused.json()["error"]["code"] == "too_many_streams"
    bobs_task = await db(make_task)(owner=bob)
    bob_async = AsyncClient()
    await bob_async.aforce_login(bob)
    assert (await bob_async.get(f"/api/tasks/{bobs_task.pk}/events")).status_code == 200

    await open_streams[0].close()
    again = await follow(alice_async, task.pk)  # a closed stream gives its place back
    await again.close()
    await open_streams[1].close()


@db
def connections_lent() -> int:
    """Connections the process's pool has lent out and not had back."""
    stats = connection.pool.get_stats()
    return stats["pool_size"] - stats["pool_available"]


async def one_request(client, task_id, opened: asyncio.Queue, go: asyncio.Event) -> SSE:
    """Follow the task as one ASGI request does, in a thread-sensitive context of its own
    (where Django runs each request's synchronous work in a thread of that request)."""
    async with ThreadSensitiveContext():
        stream = await follow(client, task_id)
        await opened.put((await stream.next()).id)
        await go.wait()
        try:
            return await stream.next()
        finally:
            await stream.close()


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="counts the PostgreSQL pool's connections"
)
async def test_open_streams_take_no_database_connection_each(alice_async, make_task, settings):
    settings.REPORTS_MAX_STREAMS_PER_USER = 100
    settings.REPORTS_POLL_S = 0.05
    task = await db(make_task)()
    running = await claim(task)
    opened: asyncio.Queue = asyncio.Queue()
    go = asyncio.Event()
    requests = [
        asyncio.create_task(one_request(alice_async, task.pk, opened, go)) for _ in range(40)
    ]
    for _ in requests:
        assert await asyncio.wait_for(opened.get(), WAIT_S) == 1  # each has read the table

    # Open streams hold no connection each (40 here): a fixed few are lent out (the
    # shared database thread's, the test's own; a page read thread gives its back after
    # each read), whatever the number of streams.
    assert await connections_lent() <= 3
    await append(running, "to all")
    go.set()
    delivered = await asyncio.wait_for(asyncio.gather(*requests), WAIT_S)
    assert delivered == [SSE(2, "delta", {"text": "to all", "attempt": 1})] * len(requests)


async def test_a_connect_runs_a_fixed_number_of_queries_however_long_the_replay(
    alice_async, make_task, settings
):
    settings.REPORTS_POLL_S = 60  # no poll of the table meanwhile
    task = await db(make_task)()
    running = await claim(task)
    for _ in range(30):
        await append(running, "a")

    # session, user, the task, the feed's start, the replay (status, events)
    async with queries_of_the_streams() as queries:
        stream = await follow(alice_async, task.pk)
        assert [e.id for e in [await stream.next() for _ in range(31)]] == list(range(1, 32))
    await stream.close()
    assert 3 <= len(queries) <= 6, [q["sql"] for q in queries.captured_queries]


# --- a token revoked, a session ended, while the stream is open ---------------------------


@db
def issue(user, label: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {ApiToken.objects.issue(user, label=label)}"}


@db
def revoke(username: str, label: str) -> None:
    call_command("revoke_token", username, label=label, stdout=StringIO())


async def test_a_stream_ends_once_its_token_is_revoked_while_one_with_another_token_goes_on(
    make_task, alice, settings, monkeypatch
):
    """Revoking a leaked token stops what it opened, at the next check (the ticker's, its
    interval made short here): the stream ends, and asking again is 401."""
    settings.REPORTS_POLL_S = 60
    monkeypatch.setattr(credentials, "RECHECK_S", 0.05)
    task = await db(make_task)()
    running = await claim(task)
    leaked, kept = await issue(alice, "leaked"), await issue(alice, "laptop")
    revoked_stream = await follow(AsyncClient(), task.pk, **leaked)
    kept_stream = await follow(AsyncClient(), task.pk, **kept)
    for stream in (revoked_stream, kept_stream):
        assert (await stream.next()).id == 1

    await revoke("alice", "leaked")
    assert await revoked_stream.next() is None  # it ends: no terminal event, no error event
    again = await AsyncClient().get(f"/api/tasks/{task.pk}/events?after=1", headers=leaked)
    assert again.status_code == 401
    assert again.json()["error"]["code"] == "unauthenticated"

    await credentials.check_now()  # one check more, after the one that ended it
    hello = await append(running, "Hello")
    await broadcast.publish([hello])
    assert await kept_stream.next() == SSE(2, "delta", {"text": "Hello", "attempt": 1})
    await kept_stream.close()
    await revoked_stream.close()


async def test_a_revoked_token_ends_its_stream_after_the_request_that_started_the_checks_ended(
    make_task, alice, settings, monkeypatch
):
    """The checks go on for every open stream once the request of the stream that started
    them has ended (the server runs each request in a thread-sensitive context of its
    own, `reports.serving.handler`, which closes with it): a token revoked later still
    ends what it opened."""
    settings.REPORTS_POLL_S = 60
    monkeypatch.setattr(credentials, "RECHECK_S", 0.05)
    task = await db(make_task)()
    await claim(task)
    first, leaked = await issue(alice, "first"), await issue(alice, "leaked")
    async with ThreadSensitiveContext(executor=RequestThread()):  # the first request
        first_stream = await follow(AsyncClient(), task.pk, **first)
        assert (await first_stream.next()).id == 1
        leaked_stream = await follow(AsyncClient(), task.pk, **leaked)
        await first_stream.close()
    assert (await leaked_stream.next()).id == 1

    await revoke("alice", "leaked")
    assert await leaked_stream.next() is None
    await leaked_stream.close()


async def test_a_stream_of_a_session_ends_once_the_session_logs_out(
    alice_async, make_task, settings
):
    settings.REPORTS_POLL_S = 60
    task = await db(make_task)()
    await claim(task)
    stream = await follow(alice_async, task.pk)
    assert (await stream.next()).id == 1
    await credentials.check_now()
    await alice_async.alogout()
    await credentials.check_now()
    assert await stream.next() is None
    await stream.close()


async def test_a_check_of_the_streams_credentials_runs_the_same_queries_however_many_are_open(
    make_task, alice, bob, settings, monkeypatch
):
    settings.REPORTS_POLL_S = 60
    settings.REPORTS_MAX_STREAMS_PER_USER = 100
    task = await db(make_task)()
    await claim(task)
    bobs_task = await db(make_task)(owner=bob)
    await claim(bobs_task)
    read = credentials.read
    checks = []

    def counted(round_):
        with CaptureQueriesContext(connection) as queries:
            found = read(round_)
        checks.append([q["sql"] for q in queries.captured_queries])
        return found

    monkeypatch.setattr(credentials, "read", counted)
    streams = []

    async def open_streams(count: int) -> None:
        for n in range(count):
            owner, owned = (alice, task) if n % 2 else (bob, bobs_task)
            session = AsyncClient()
            await session.aforce_login(owner)
            streams.append(await follow(session, owned.pk))
            streams.append(await follow(AsyncClient(), owned.pk, **await issue(owner, str(n))))
        for stream in streams[-2 * count :]:
            assert (await stream.next()).id == 1  # open, and followed

    await open_streams(1)
    await credentials.check_now()
    await open_streams(10)
    await credentials.check_now()

    one, twenty_two = checks
    # the sessions, their users, the tokens: one query each, whatever their number
    assert len(one) == len(twenty_two) == 3, twenty_two
    for stream in streams:
        await stream.close()
