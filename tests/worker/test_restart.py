"""The embedded server killed mid-stream and started again: its tasks go on at once.

A real server process (`runserver`, the embedded worker, SQLite) with `REPORTS_LEASE_S`
at 30 s: after a SIGKILL and a restart, the new server knows the lease's holder was a
process of this host that is gone, and re-runs the task without waiting for the lease.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.browser.server import LiveServer
from tests.helpers import SAMPLE, multipart, wait_for

METRICS_TOKEN = "restart-test-metrics-token"
LEASE_S = 30
# The lease is renewed every LEASE_S / 5, so when its holder is killed it still has at least
# 24 s to run: text from a second attempt this soon after the kill did not wait for it,
# with room for a slow restart on a loaded machine.
BEFORE_THE_LEASE_S = 20


def call(server: LiveServer, token: str, path: str, body=None, content_type=None) -> bytes:
    request = urllib.request.Request(f"{server.url}{path}", data=body)
    request.add_header("Authorization", f"Bearer {token}")
    if content_type:
        request.add_header("Content-Type", content_type)
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.read()


@pytest.fixture
def server(tmp_path):
    server = LiveServer(
        tmp_path / "server",
        DATABASE_URL="",  # the demo's own SQLite, whatever this test run uses
        REDIS_URL="",
        REPORTS_LEASE_S=LEASE_S,
        REPORTS_SIMULATED_TTFT_S=0.1,
        REPORTS_SIMULATED_TOKENS_PER_S=20,  # still streaming when it is killed
        REPORTS_METRICS_TOKEN=METRICS_TOKEN,
    ).start()
    yield server
    server.stop()


def test_a_restarted_server_streams_again_within_seconds_not_the_lease(server):
    token = server.manage("issue_token", "alice").strip().splitlines()[-1]
    body, content_type = multipart("article.md", SAMPLE.encode())
    task_id = json.loads(call(server, token, "/api/tasks", body, content_type))["task_id"]

    def task() -> dict:
        return json.loads(call(server, token, f"/api/tasks/{task_id}"))

    wait_for(lambda: task()["text_length"] >= 20, "text from the first attempt", timeout=60)
    killed = time.monotonic()
    server.stop(crash=True)  # SIGKILL mid-stream: the lease stays, 24 to 30 s from expiry
    server.start()

    now = wait_for(
        lambda: (t := task())["text_length"] > 0 and len(t["attempts"]) == 2 and t,
        "text from a second attempt",
        timeout=30,
    )
    assert time.monotonic() - killed < BEFORE_THE_LEASE_S
    first = now["attempts"][0]
    assert (first["status"], first["error_type"]) == ("interrupted", "worker_lost")

    # The restarted process watches its event loop, and says so on /metrics.
    metrics = call(server, METRICS_TOKEN, "/metrics").decode()
    lag = {f.name: f for f in text_string_to_metric_families(metrics)}
    samples = lag["reportline_event_loop_lag_seconds"].samples
    assert next(s.value for s in samples if s.name.endswith("_count")) > 0
