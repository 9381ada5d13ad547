"""A web process that got SIGTERM refuses new streams and nothing else (reports.serving.stopping);
tests/test_drain.py stops real servers."""

from __future__ import annotations

import asyncio
import gc
import json
import uuid

import pytest
from channels.testing import HttpCommunicator, WebsocketCommunicator

from project.asgi import application
from reports.serving import stopping

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def is_stopping(monkeypatch):
    monkeypatch.setattr(stopping, "_stopping", True)


async def get(path: str) -> dict:
    communicator = HttpCommunicator(application, "GET", path, headers=[(b"host", b"testserver")])
    return await communicator.get_response(timeout=10)


def header(answer: dict, name: bytes) -> str:
    return dict(answer["headers"])[name].decode()


async def test_a_new_event_stream_is_refused_with_503_json(is_stopping):
    answer = await get(f"/api/tasks/{uuid.uuid4()}/events")

    assert answer["status"] == 503
    assert json.loads(answer["body"])["error"]["code"] == "draining"
    assert header(answer, b"Retry-After") == "1"
    assert {"no-store", "private"} <= {
        d.strip() for d in header(answer, b"Cache-Control").split(",")
    }


async def test_what_is_not_a_stream_is_still_served(is_stopping):
    # The URL conf decides what a stream is: not the way a path happens to end.
    assert (await get("/no/such/page/events"))["status"] == 404
    assert (await get("/healthz"))["status"] == 200


async def test_a_new_websocket_handshake_is_refused(is_stopping):
    socket = WebsocketCommunicator(application, f"/ws/tasks/{uuid.uuid4()}/")
    connected, _ = await socket.connect(timeout=10)
    assert not connected


async def test_an_event_stream_leaves_no_task_pending_behind():
    """Django stops listening for the client's disconnect when an answer ends: what the
    stream's guard waited on with it must go too, not linger until the collector finds it
    pending and asyncio logs so (a line that is not one of the server's JSON lines)."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
    try:
        for _ in range(3):
            assert (await get(f"/api/tasks/{uuid.uuid4()}/events"))["status"] in (401, 404)
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()
    finally:
        loop.set_exception_handler(None)
    assert reported == []
