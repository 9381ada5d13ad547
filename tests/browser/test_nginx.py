"""Real nginx in front of the real app, with the repository's deploy/nginx.conf: HTTPS (with
a self-signed certificate), and plain HTTP that only redirects to it."""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.harness import NGINX, write_nginx_conf
from tests.browser.server import ROOT, LiveServer, free_port
from tests.helpers import SAMPLE, self_signed_certificate

# The test's own client of the self-signed server.
UNVERIFIED = ssl._create_unverified_context()


@pytest.fixture(scope="module")
def nginx_ports(slow_server: LiveServer) -> Iterator[tuple[int, int]]:
    """Run nginx with deploy/nginx.conf pointed at the test server; return its HTTPS and
    plain HTTP ports."""
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed")
    port, plain_port = free_port(), free_port()
    prefix = Path(tempfile.mkdtemp(prefix="reportline-nginx-"))
    cert, key = self_signed_certificate(prefix)
    site = (ROOT / "deploy" / "nginx.conf").read_text()
    site = site.replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{slow_server.port};")
    site = site.replace("    server 127.0.0.1:8001;\n", "")
    site = site.replace("listen 80;", f"listen 127.0.0.1:{plain_port};")
    site = site.replace("listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;")
    site = site.replace("/etc/ssl/reportline/fullchain.pem", str(cert))
    site = site.replace("/etc/ssl/reportline/privkey.pem", str(key))
    (prefix / "site.conf").write_text(site)
    write_nginx_conf(prefix, connections=16)
    process = subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(prefix / "nginx.conf")])
    try:
        _wait_for_port(port)
        yield port, plain_port
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(prefix, ignore_errors=True)


@pytest.fixture(scope="module")
def nginx(nginx_ports: tuple[int, int]) -> int:
    return nginx_ports[0]


def https(port: int) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=UNVERIFIED)


def _wait_for_port(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail("nginx did not start")


@pytest.fixture(scope="module")
def token(slow_server: LiveServer) -> str:
    return slow_server.manage("issue_token", "alice").strip().splitlines()[-1]


def _submit(port: int, token: str) -> str:
    boundary = uuid.uuid4().hex
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="a.md"\r\n'
        f"Content-Type: text/markdown\r\n\r\n{SAMPLE}\r\n"
        f"--{boundary}--\r\n"
    ).encode()
    conn = https(port)
    conn.request(
        "POST",
        "/api/tasks",
        body,
        {
            "Authorization": f"Bearer {token}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )
    reply = conn.getresponse()
    assert reply.status == 201, reply.read()
    return json.loads(reply.read())["task_id"]


def _status(port: int, token: str, task_id: str) -> str:
    conn = https(port)
    conn.request("GET", f"/api/tasks/{task_id}", headers={"Authorization": f"Bearer {token}"})
    return json.loads(conn.getresponse().read())["status"]


def test_server_sent_events_arrive_through_nginx_as_they_are_written(nginx, token):
    task_id = _submit(nginx, token)
    conn = https(nginx)
    conn.request(
        "GET",
        f"/api/tasks/{task_id}/events",
        # As a browser asks: compressing would hold events back until a block fills.
        headers={"Authorization": f"Bearer {token}", "Accept-Encoding": "gzip"},
    )
    stream = conn.getresponse()
    assert stream.status == 200
    assert stream.getheader("Content-Encoding") is None
    status_at_first_text = None
    deltas = 0
    for line in iter(stream.readline, b""):
        if line == b"event: delta\n":
            deltas += 1
            if status_at_first_text is None:
                status_at_first_text = _status(nginx, token, task_id)
        if line == b"event: succeeded\n":
            break
    # Buffered, the first text would only come out with the last: after success.
    assert status_at_first_text == "running"
    assert deltas > 5
    assert _status(nginx, token, task_id) == "succeeded"


def test_the_task_page_websocket_is_upgraded_through_nginx(nginx, token, slow_server):
    task_id = _submit(nginx, token)
    session = (
        slow_server.manage(
            "shell",
            "-c",
            "from django.contrib.auth import get_user_model, SESSION_KEY, BACKEND_SESSION_KEY, "
            "HASH_SESSION_KEY\nfrom django.contrib.sessions.backends.db import SessionStore\n"
            "u = get_user_model().objects.get(username='alice')\ns = SessionStore()\n"
            "s[SESSION_KEY] = str(u.pk)\n"
            "s[BACKEND_SESSION_KEY] = 'django.contrib.auth.backends.ModelBackend'\n"
            "s[HASH_SESSION_KEY] = u.get_session_auth_hash()\ns.create()\nprint(s.session_key)",
        )
        .strip()
        .splitlines()[-1]
    )
    key = base64.b64encode(os.urandom(16)).decode()
    raw = socket.create_connection(("127.0.0.1", nginx), timeout=10)
    with UNVERIFIED.wrap_socket(raw) as sock:
        sock.sendall(
            (
                f"GET /ws/tasks/{task_id}/?after=0 HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{nginx}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                f"Origin: https://127.0.0.1:{nginx}\r\nCookie: sessionid={session}\r\n\r\n"
            ).encode()
        )
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += sock.recv(4096)
        head, _, rest = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head
        first_frame = rest or sock.recv(4096)
        assert first_frame[0] & 0x0F == 0x1  # a text frame: the replayed events


def test_a_body_over_nginx_limit_is_refused_with_the_api_error_body(nginx, token):
    """nginx stops a request whose Content-Length is over its limit before the body is sent."""
    conn = https(nginx)
    conn.putrequest("POST", "/api/tasks")
    conn.putheader("Authorization", f"Bearer {token}")
    conn.putheader("Content-Type", "multipart/form-data; boundary=x")
    conn.putheader("Content-Length", str(30 * 1024 * 1024))
    conn.endheaders()
    reply = conn.getresponse()
    assert reply.status == 413
    assert reply.getheader("Content-Type").startswith("application/json")
    assert json.loads(reply.read())["error"]["code"] == "file_too_large"


def test_plain_http_only_redirects_to_https(nginx_ports, token):
    _https_port, plain_port = nginx_ports
    conn = http.client.HTTPConnection("127.0.0.1", plain_port, timeout=10)
    conn.request("GET", "/api/tasks", headers={"Authorization": f"Bearer {token}"})
    reply = conn.getresponse()
    assert reply.status == 301
    assert reply.getheader("Location") == "https://127.0.0.1/api/tasks"
