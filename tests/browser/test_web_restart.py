"""The scale-out layout: the web process dies and comes back while a separate worker
keeps writing. The page and an SSE client both resume with no gap and no repeat."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
from collections.abc import Iterator

import psycopg
import pytest
from playwright.sync_api import expect

from tests.browser.helpers import stream_text, upload
from tests.browser.server import PYTHON, ROOT, LiveServer
from tests.helpers import read_events, report_body


@pytest.fixture(params=["sqlite", "postgres+redis"])
def engines(request) -> Iterator[dict]:
    """The environment of a layout: the demo's SQLite, or PostgreSQL with Redis."""
    if request.param == "sqlite":
        yield {}
        return
    try:
        admin = psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True)
        socket.create_connection(("127.0.0.1", 6379), timeout=2).close()
    except (psycopg.Error, OSError):
        pytest.skip("PostgreSQL and Redis are not running here")
    name = f"reportline_web_restart_{os.getpid()}"
    with admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
        try:
            yield {
                "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{name}",
                "REDIS_URL": "redis://127.0.0.1:6379/0",
            }
        finally:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def split_server(
    data_root, database_template, engines
) -> Iterator[tuple[LiveServer, subprocess.Popen]]:
    """A web process with no embedded worker, and a reportworker beside it."""
    server = LiveServer(
        data_root / f"split-{len(engines)}",
        database_from=None if engines else database_template,
        REPORTS_EMBEDDED_WORKER=0,
        REPORTS_SIMULATED_TTFT_S=0.2,
        REPORTS_SIMULATED_TOKENS_PER_S=30,
        REPORTS_POLL_S=0.2,  # with the in-memory layer, the table is how news arrives
        **engines,
    ).start()
    worker = subprocess.Popen(
        [str(PYTHON), "manage.py", "reportworker", "--slots", "1"],
        cwd=ROOT,
        env=server.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    yield server, worker
    worker.terminate()
    worker.wait(timeout=30)
    server.stop()


class EventStream:
    """An SSE client that remembers every event it got, across reconnections."""

    def __init__(self, server: LiveServer, token: str, task_id: str) -> None:
        self.server, self.token, self.task_id = server, token, task_id
        self.events: list[tuple[int, str, dict]] = []

    def read(self, *, until_deltas: int | None = None) -> None:
        """Read from the last seq seen until the stream ends, breaks, or has enough deltas."""
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.events:
            headers["Last-Event-ID"] = str(self.events[-1][0])
        conn.request("GET", f"/api/tasks/{self.task_id}/events", headers=headers)
        reply = conn.getresponse()
        assert reply.status == 200
        try:
            for event in read_events(reply):
                self.events.append(event)
                deltas = sum(1 for e in self.events if e[1] == "delta")
                if until_deltas is not None and deltas >= until_deltas:
                    return
        except (http.client.IncompleteRead, ConnectionError, TimeoutError):
            pass  # the server went away mid-stream
        finally:
            conn.close()


def test_a_web_restart_mid_stream_loses_nothing_on_the_page_or_the_event_stream(
    open_page, split_server, sample_file, problems
):
    problems.allow("WebSocket connection to", "[object Event]", "Failed to load resource")
    server, _worker = split_server
    token = server.manage("issue_token", "alice").strip().splitlines()[-1]
    page = open_page(server)
    task_id = upload(page, sample_file)
    page.wait_for_function(
        "() => document.querySelector('[data-report-stream]').textContent.length >= 20"
    )
    sse = EventStream(server, token, task_id)
    sse.read(until_deltas=3)

    server.stop(crash=True)  # the web process only: the worker writes on
    expect(page.locator("[data-connection]")).to_contain_text("Connection lost — reconnecting in")
    server.start()

    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=60_000
    )
    sse.read()
    with page.expect_download() as info:
        page.click("a[data-download]")
    report = info.value.path().read_text()

    assert stream_text(page).rstrip() == report_body(report)
    assert page.locator("details[data-attempt]").count() == 0  # one attempt, never interrupted
    seqs = [seq for seq, _, _ in sse.events]
    assert seqs == list(range(1, len(seqs) + 1))  # no gap, no repeat across the reconnect
    streamed = "".join(d["text"] for _, kind, d in sse.events if kind == "delta")
    assert streamed.rstrip() == report_body(report)
    assert sse.events[-1][1] == "succeeded"
