"""Access over real sockets against the running server: HTTP routes, the SSE stream,
downloads and the WebSocket, for the owner (alice), another user (bob) and an anonymous
client, plus a WebSocket from a foreign origin; and uploads over the limits, refused while
the server stays healthy."""

from __future__ import annotations

import base64
import os
import socket
import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import APIRequestContext, Page, expect

from tests.browser.helpers import serve, upload
from tests.browser.server import LiveServer
from tests.helpers import TASK_ROUTES

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def guarded_server(data_root, database_template) -> Iterator[LiveServer]:
    """Fast reports, and small upload limits: 1 MB a file, 2 MB a request."""
    yield from serve(
        data_root,
        database_template,
        "guarded",
        REPORTS_SIMULATED_TTFT_S=0.1,
        REPORTS_SIMULATED_TOKENS_PER_S=600,
        REPORTS_POLL_S=0.2,
        REPORTS_MAX_FILE_MB=1,
        REPORTS_MAX_REQUEST_MB=2,
    )


@pytest.fixture
def alices_task(open_page, guarded_server, sample_file) -> tuple[Page, str]:
    page = open_page(guarded_server, "alice")
    task_id = upload(page, sample_file)
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=30_000
    )
    return page, task_id


def csrf_headers(page: Page) -> dict[str, str]:
    token = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    return {"X-CSRFToken": token, "Referer": page.url}


def call(request: APIRequestContext, method: str, path: str, headers=None):
    if method == "post":
        return request.post(path, data={"frontend_first_text_ms": 5}, headers=headers or {})
    return request.get(path, headers=headers or {})


def test_bob_and_an_anonymous_client_are_refused_on_every_route(
    alices_task, open_page, guarded_server, browser, problems
):
    alice, task_id = alices_task
    problems.allow("status of 404")  # bob opening alice's task page: the 404 is the point
    bob = open_page(guarded_server, "bob")
    bob.goto("/")
    anonymous = browser.new_context(base_url=guarded_server.url)
    try:
        for method, path in TASK_ROUTES:
            missing = call(bob.request, method, path.format(id=uuid.uuid4()), csrf_headers(bob))
            assert missing.status == 404
            foreign = call(bob.request, method, path.format(id=task_id), csrf_headers(bob))
            assert (foreign.status, foreign.body()) == (404, missing.body()), path
            refused = call(anonymous.request, method, path.format(id=task_id))
            assert refused.status == 401, path
            assert refused.json()["error"]["code"] == "unauthenticated"
        # The pages too: bob gets a 404, the anonymous client the login page.
        assert bob.goto(f"/tasks/{task_id}/").status == 404
        login = anonymous.new_page()
        login.goto(f"/tasks/{task_id}/")
        assert "/accounts/login/" in login.url
        # Alice herself streams and downloads her report.
        events = alice.request.get(f"/api/tasks/{task_id}/events")
        assert events.ok and "event: succeeded" in events.text()
        result = alice.request.get(f"/api/tasks/{task_id}/result")
        assert result.ok
        assert result.headers["content-disposition"] == 'attachment; filename="harbours-report.md"'

        assert result.headers["x-content-type-options"] == "nosniff"
    finally:
        anonymous.close()


def handshake(server: LiveServer, path: str, *, origin: str, cookie: str | None) -> str:
    """Open a WebSocket over a plain socket; return the status line the server answered."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        f"Origin: {origin}",
    ]
    if cookie:
        lines.append(f"Cookie: {cookie}")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(1024)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0].decode()


def session_cookie(page: Page) -> str:
    return next(
        f"sessionid={c['value']}" for c in page.context.cookies() if c["name"] == "sessionid"
    )


def test_the_websocket_is_refused_to_others_and_to_foreign_origins(
    alices_task, open_page, guarded_server
):
    alice, task_id = alices_task
    bob = open_page(guarded_server, "bob")
    bob.goto("/")
    path = f"/ws/tasks/{task_id}/?after=0"
    own = guarded_server.url

    assert " 101 " in handshake(guarded_server, path, origin=own, cookie=session_cookie(alice))
    refusals = {
        "bob": handshake(guarded_server, path, origin=own, cookie=session_cookie(bob)),
        "anonymous": handshake(guarded_server, path, origin=own, cookie=None),
        "foreign origin": handshake(
            guarded_server, path, origin="https://evil.example", cookie=session_cookie(alice)
        ),
        "missing task": handshake(
            guarded_server, f"/ws/tasks/{uuid.uuid4()}/", origin=own, cookie=session_cookie(alice)
        ),
    }
    assert {who: line.split(" ", 2)[1] for who, line in refusals.items()} == dict.fromkeys(
        refusals, "403"
    )


def test_uploads_over_the_limits_are_413_and_the_server_stays_healthy(
    open_page, guarded_server, sample_file
):
    page = open_page(guarded_server, "alice")
    page.goto("/")
    headers = csrf_headers(page)
    before = len(page.request.get("/api/tasks").json()["tasks"])

    def post(name: str, data: bytes):
        return page.request.post(
            "/api/tasks",
            multipart={"files": {"name": name, "mimeType": "text/markdown", "buffer": data}},
            headers=headers,
        )

    too_big_request = post("whole.md", b"a" * (3 * 1024 * 1024))
    assert too_big_request.status == 413
    assert too_big_request.json()["error"]["code"] == "file_too_large"
    assert "2 MB a request" in too_big_request.json()["error"]["message"]

    too_big_file = post("file.md", b"b" * (1536 * 1024))  # under 2 MB, over 1 MB a file
    assert too_big_file.status == 413
    assert "file.md is over the limit of 1 MB a file" in too_big_file.json()["error"]["message"]

    assert len(page.request.get("/api/tasks").json()["tasks"]) == before  # nothing created
    task_id = upload(page, sample_file)
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=30_000
    )
    assert page.request.get(f"/api/tasks/{task_id}").json()["status"] == "succeeded"
