"""A web process that got SIGTERM refuses new streams and nothing else (reports.serving.stopping);
tests/test_drain.py stops real servers."""

from __future__ import annotations

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
