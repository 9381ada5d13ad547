"""SIGTERM on a web process (project/asgi.py): open streams are told to reconnect, land on
the other web process sharing the listening socket, and resume with nothing lost."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from tests.helpers import database_url, read_events, wait_for_port

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[1]
DRAIN_S = 5
SEQ = re.compile(r'data-delta data-seq="(\d+)"')


@pytest.fixture
def shared_socket():
    """A listening socket that several web processes accept from, as behind a balancer."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.set_inheritable(True)
    yield sock
    sock.close()


# daphne is the demo's server, uvicorn production's (docs/production.md): both must drain.
SERVERS = {
    "daphne": ["-m", "daphne", "--fd", "{fd}", "project.asgi:application"],
    "uvicorn": [
        "-m",
        "uvicorn",
        "--fd",
        "{fd}",
        "--lifespan",
        "off",
        "--timeout-graceful-shutdown",
        str(DRAIN_S + 2),
        "project.asgi:application",
    ],
}


@pytest.fixture(params=SERVERS)
def layout(request, tmp_path, shared_socket):
    """Return a starter of web processes (under each server in turn) on the shared socket,
    with one worker beside them."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,  # the test's sessions are valid there
        "DATABASE_URL": database_url(connection.settings_dict),
        "REPORTS_DATA_DIR": str(tmp_path),
        "REPORTS_EMBEDDED_WORKER": "0",
        "REPORTS_POLL_S": "0.05",
        "REPORTS_DRAIN_S": str(DRAIN_S),
        "REPORTS_SIMULATED_TTFT_S": "0",
        "REPORTS_SIMULATED_TOKENS_PER_S": "40",
    }
    processes = []

    def start(*command: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, *command],
            cwd=ROOT,
            env=env,
            pass_fds=[shared_socket.fileno()],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        processes.append(process)
        return process

    def web() -> subprocess.Popen:
        fd = str(shared_socket.fileno())
        return start(*(arg.format(fd=fd) for arg in SERVERS[request.param]))

    start("manage.py", "reportworker", "--slots", "2")
    yield web
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


class Follower(threading.Thread):
    """A client of one task's stream that reconnects after its last seq until the end."""

    def __init__(self, port: int, task_id: str, *, cookie: str = "", token: str = ""):
        super().__init__(daemon=True)
        self.port, self.task_id, self.cookie, self.token = port, task_id, cookie, token
        self.seqs: list[int] = []
        self.connections = 0
        self.closes: list[int | None] = []
        self.first_reply = threading.Event()
        self.done = False

    def run(self) -> None:
        deadline = time.monotonic() + 60
        while not self.done and time.monotonic() < deadline:
            self.connections += 1
            try:
                self.follow_websocket() if self.cookie else self.follow_events()
            except (OSError, http.client.HTTPException, WebSocketException):
                time.sleep(0.1)

    def follow_websocket(self) -> None:
        after = self.seqs[-1] if self.seqs else 0
        with connect(
            f"ws://127.0.0.1:{self.port}/ws/tasks/{self.task_id}/?after={after}",
            additional_headers={
                "Cookie": self.cookie,
                "Origin": f"http://127.0.0.1:{self.port}",  # the page's own origin
            },
            open_timeout=10,
        ) as ws:
            try:
                for message in ws:
                    self.seqs += [int(s) for s in SEQ.findall(message)]
                    self.first_reply.set()
            finally:
                self.closes.append(ws.close_code)
                self.done = ws.close_code == 1000

    def follow_events(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.seqs:
            headers["Last-Event-ID"] = str(self.seqs[-1])
        try:
            conn.request("GET", f"/api/tasks/{self.task_id}/events", headers=headers)
            reply = conn.getresponse()
            if reply.status != 200:
                reply.read()
                time.sleep(0.2)
                return
            for seq, kind, _ in read_events(reply):
                self.first_reply.set()
                if kind == "delta":
                    self.seqs.append(seq)
                self.done = kind in {"succeeded", "failed", "cancelled"}
            self.closes.append(None)
        finally:
            conn.close()


def test_sigterm_drains_a_web_process_and_its_streams_resume_on_another(
    layout, shared_socket, make_task, alice, alice_token
):
    port = shared_socket.getsockname()[1]
    first = layout()
    wait_for_port(port, timeout=30)
    client = Client()
    client.force_login(alice)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    task = make_task()
    followers = [Follower(port, str(task.pk), cookie=cookie) for _ in range(2)]
    followers += [Follower(port, str(task.pk), token=alice_token) for _ in range(2)]
    for follower in followers:
        follower.start()
    for follower in followers:  # every stream is open on the first process, mid-report
        assert follower.first_reply.wait(timeout=30)

    layout()  # the second process shares the socket from now on
    started = time.monotonic()
    first.send_signal(signal.SIGTERM)
    first.wait(timeout=DRAIN_S + 10)  # bounded: the drain, then the server's own stop
    assert time.monotonic() - started < DRAIN_S + 10

    for follower in followers:
        follower.join(timeout=60)
        assert follower.done, "the stream did not reach the end of the report"
        assert follower.connections >= 2  # it was told to reconnect, and did
        assert follower.seqs == sorted(set(follower.seqs))  # no repeat
    websockets = [f for f in followers if f.cookie]
    assert [f.closes[0] for f in websockets] == [4012, 4012]  # "this server stops: come back"
    deltas = json.dumps(sorted(set(followers[0].seqs)))
    for follower in followers:  # every client saw every delta: nothing lost
        assert json.dumps(follower.seqs) == deltas
