"""Log lines: one JSON object per event, joined by ids, with no document text or secrets."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from reports.models import Attempt
from reports.observability.logs import bound, log_event
from tests.helpers import free_port, lines_of, run_all, submit, task_of, upload, wait_for_port

ROOT = Path(__file__).resolve().parents[2]

# Every field issue 6 names, to be found in the lines of one task's life.
FIELDS = {
    "task_id",
    "attempt_id",
    "request_id",
    "trace_id",
    "stage",
    "status",
    "error_type",
    "queue_ms",
    "first_text_ms",
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "model",
    "prompt_version",
    "app_version",
    "result_id",
    "cost_status",
    "usage_source",
}
SECRET_DOCUMENT = (
    "# Harbour budget\n\nThe quiet harbour of Saint-Malo keeps zebra-crossing-7731 notes.\n\n"
    "## Plans\n\nTurbines near the narrow entrance produce steady power for hours.\n"
)
SECRET_INSTRUCTIONS = "Mention the pelican ledger of Quimper"


def test_one_tasks_life_has_every_field_joined_by_task_and_attempt(
    alice_client, alice_token, worker, logged
):
    response = submit(
        alice_client,
        upload("harbour.md", SECRET_DOCUMENT),
        instructions=SECRET_INSTRUCTIONS,
        headers={"X-Request-ID": "client-req-0001"},
    )
    task = task_of(response)
    run_all(worker)
    lines = lines_of(logged)
    mine = [line for line in lines if line.get("task_id") == str(task.pk)]
    events = [line["event"] for line in mine]
    assert events[0] == "task.admitted"
    assert events[-1] == "task.ended"
    for expected in ("attempt.claimed", "attempt.first_text", "stage.ended", "attempt.ended"):
        assert expected in events
    stages = [line["stage"] for line in mine if line["event"] == "stage.ended"]
    assert stages == ["parse", "prepare", "generate", "validate", "render", "save"]

    found = set().union(*(line.keys() for line in mine))
    assert found >= FIELDS, FIELDS - found

    # Joined: the worker's lines carry the creating request's id and the task's trace id,
    # and the attempt's lines its attempt id.
    attempt = Attempt.objects.get(task=task)
    assert {line["request_id"] for line in mine} == {"client-req-0001"}
    assert {line["trace_id"] for line in mine} == {task.trace_id}
    worker_lines = mine[1:]
    assert {line["attempt_id"] for line in worker_lines} == {str(attempt.pk)}
    ended = mine[-1]
    assert ended["status"] == "succeeded"
    task.refresh_from_db()
    assert ended["result_id"] == str(task.result_id)
    assert ended["queue_ms"] is not None and ended["duration_ms"] >= ended["queue_ms"]
    attempt_end = next(line for line in mine if line["event"] == "attempt.ended")
    assert attempt_end["output_tokens"] > 0 and attempt_end["usage_source"] == "estimate"

    # No document text, instructions, report text or token anywhere in the logs.
    everything = "\n".join(json.dumps(line) for line in lines)
    for secret in ("zebra-crossing-7731", "Saint-Malo", "pelican ledger", alice_token):
        assert secret not in everything
    attempt.refresh_from_db()
    assert attempt.text[40:120] not in everything


def test_a_failure_names_its_error_type_on_attempt_and_task_lines(alice_client, worker, logged):
    task = task_of(submit(alice_client, scenario="error"))
    run_all(worker)
    mine = [line for line in lines_of(logged) if line.get("task_id") == str(task.pk)]
    ends = {line["event"]: line for line in mine if line["event"].endswith(".ended")}
    assert ends["attempt.ended"]["error_type"] == "provider_error"
    assert ends["task.ended"]["error_type"] == "provider_error"
    assert ends["task.ended"]["result_id"] is None


def test_cancelling_a_queued_task_logs_its_end(alice_client, logged):
    task = task_of(submit(alice_client))
    alice_client.post(f"/api/tasks/{task.pk}/cancel")
    ended = [line for line in lines_of(logged) if line["event"] == "task.ended"]
    assert [(line["task_id"], line["status"]) for line in ended] == [(str(task.pk), "cancelled")]


def test_request_id_is_echoed_kept_when_sane_and_replaced_when_not(alice_client):
    kept = alice_client.get("/api/tasks", headers={"X-Request-ID": "abc-123.def:456"})
    assert kept["X-Request-ID"] == "abc-123.def:456"
    for bad in ("short", "has space in it", "x" * 200, "quote\"injection'here"):
        replaced = alice_client.get("/api/tasks", headers={"X-Request-ID": bad})
        assert replaced["X-Request-ID"] != bad
        assert len(replaced["X-Request-ID"]) == 32
    fresh = alice_client.get("/api/tasks")
    assert fresh["X-Request-ID"] != alice_client.get("/api/tasks")["X-Request-ID"]


def test_the_trace_of_an_incoming_traceparent_is_the_tasks(alice_client):
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    task = task_of(submit(alice_client, headers={"traceparent": traceparent}))
    assert task.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert task.traceparent.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    assert task.request_id


def test_plain_log_calls_carry_the_bound_ids_and_exceptions(logged):
    log = logging.getLogger("reports.test")
    with bound(task_id="t-1", attempt_id="a-1"):
        log.warning("plain %s", "message")
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("it broke")
    log_event(log, "outside", status="ok")
    plain, broke, outside = lines_of(logged)
    assert plain["event"] == "plain message" and plain["task_id"] == "t-1"
    assert "ValueError: boom" in broke["exc"] and broke["attempt_id"] == "a-1"
    assert "task_id" not in outside and outside["status"] == "ok"


def test_a_lost_worker_is_logged_by_the_reaper(
    make_task, settings, logged, django_capture_on_commit_callbacks
):
    from reports.models import Task
    from reports.worker.leases import claim_next_task, reap_expired_leases

    settings.REPORTS_MAX_ATTEMPTS = 2
    task = make_task()
    claimed = []
    for _ in range(2):
        claimed.append(claim_next_task("w"))
        Task.objects.filter(pk=task.pk).update(lease_expires_at=task.created_at)
        with django_capture_on_commit_callbacks(execute=True):
            reap_expired_leases()
    lines = [line for line in lines_of(logged) if line["event"].endswith(".ended")]
    assert [(line["event"], line.get("attempt_id"), line["status"]) for line in lines] == [
        ("attempt.ended", str(claimed[0].attempt_id), "interrupted"),
        ("attempt.ended", str(claimed[1].attempt_id), "interrupted"),
        ("task.ended", None, "failed"),
    ]
    assert lines[0]["task_status"] == "queued" and lines[1]["task_status"] == "failed"
    assert lines[2]["error_type"] == "worker_lost" and lines[2]["task_id"] == str(task.pk)


def test_uvicorn_with_the_deploy_log_config_writes_only_json_lines(tmp_path):
    # docs/production.md's web command: the server's own lines (started, stopping) are JSON
    # too, and its access log is off (the app's http.request line says the same and more).
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "REPORTS_", "DATABASE_", "REDIS_"))
    }
    env |= {
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DJANGO_SECRET_KEY": "test-only-secret-key-not-for-deployment",
        "DJANGO_HTTPS": "0",
        "REPORTS_DATA_DIR": str(tmp_path),
        "REPORTS_EMBEDDED_WORKER": "0",
    }
    command = ["uvicorn", "project.asgi:application", "--lifespan", "off", "--no-access-log"]
    command += ["--log-config", "deploy/uvicorn-logging.json"]
    server = subprocess.Popen(
        [sys.executable, "-m", *command, "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(port, timeout=30)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
            assert reply.status == 200
    finally:
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    assert out == ""
    lines = [json.loads(line) for line in err.splitlines()]  # each one JSON, or this fails
    events = [(line["logger"], line["event"]) for line in lines]
    assert ("uvicorn.error", f"Started server process [{server.pid}]") in events
    assert ("reports.http", "http.request") in events
    assert ("uvicorn.error", f"Finished server process [{server.pid}]") in events


def test_a_python_warning_is_a_json_line_too(tmp_path):
    # Django's own (a download streamed from a file under ASGI warns once a process) came
    # out as two lines of plain text among the JSON.
    script = "import django, warnings; django.setup(); warnings.warn('a library warns')"
    env = {key: value for key, value in os.environ.items() if not key.startswith("REPORTS_")}
    env |= {
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DJANGO_SECRET_KEY": "test-only-secret-key-not-for-deployment",
        "REPORTS_DATA_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    [line] = [json.loads(line) for line in done.stderr.splitlines()]
    assert (line["logger"], line["level"]) == ("py.warnings", "warning")
    assert "UserWarning: a library warns" in line["event"]


def test_the_connection_pool_says_the_database_is_out_of_reach_in_json_lines(tmp_path):
    script = """
import os, django
django.setup()
from django.db import connection
try:
    connection.ensure_connection()
except Exception:
    pass
os._exit(0)  # not waiting for the pool's next tries
"""
    env = {key: value for key, value in os.environ.items() if not key.startswith("REPORTS_")}
    env |= {
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DJANGO_SECRET_KEY": "test-only-secret-key-not-for-deployment",
        "DATABASE_URL": f"postgres://reportline@127.0.0.1:{free_port()}/reportline",
        "REPORTS_DB_POOL_TIMEOUT_S": "0.5",
        "REPORTS_DATA_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # each one JSON
    assert any(line["logger"].startswith("psycopg") for line in lines)


def test_a_request_for_a_host_not_served_is_one_warning_without_a_traceback(client, logged):
    # A scanner sends hosts of its own: each was an error with Django's traceback, many
    # lines of the server's own code, that would page whoever watches for errors.
    response = client.get("/", HTTP_HOST="scanner.example")

    assert response.status_code == 400
    [line] = [line for line in lines_of(logged) if line["logger"].startswith("django.security")]
    assert line["level"] == "warning"
    assert "scanner.example" in line["event"] and "ALLOWED_HOSTS" in line["event"]
    assert "exc" not in line
