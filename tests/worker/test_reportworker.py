"""`manage.py reportworker` as real processes: killed mid-stream or while reading a
document, stopped by SIGTERM, serving its probes and figures; reaching PostgreSQL directly
and through PgBouncer in transaction pooling."""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from reports import submissions
from reports.models import Attempt, Task, TaskEvent
from reports.submissions import Submission, Upload
from reports.worker.leases import POISON
from tests.helpers import (
    files_under,
    free_port,
    report_body,
    saved_report,
    stored_files,
    wait_for,
    wait_for_port,
)
from tests.security import hostile

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def test_a_killed_worker_task_finishes_on_another_as_a_new_attempt(make_task, spawn_worker):
    task = make_task()
    pace = {"REPORTS_SIMULATED_TTFT_S": "0", "REPORTS_SIMULATED_TOKENS_PER_S": "40"}
    workers = {w.pid: w for w in (spawn_worker(**pace), spawn_worker(**pace))}
    wait_for(
        lambda: TaskEvent.objects.filter(task=task, type="delta").count() >= 3,
        "a worker to stream some text",
    )
    holder = int(Task.objects.get(pk=task.pk).worker_id.split(":")[1])
    workers[holder].send_signal(signal.SIGKILL)  # mid-stream, no chance to clean up
    workers[holder].wait(timeout=10)
    partial = TaskEvent.objects.attempt_text(task.pk, 1)

    wait_for(
        lambda: Task.objects.filter(pk=task.pk, status="succeeded").exists(),
        "the task to succeed on the other worker",
    )
    task.refresh_from_db()
    assert int(task.worker_id.split(":")[1]) != holder
    first, second = Attempt.objects.filter(task=task).order_by("number")
    assert (first.status, first.error_type, first.text) == ("interrupted", "worker_lost", partial)
    assert second.status == "succeeded"
    saved = saved_report(task)
    assert (
        report_body(saved)
        == second.text.rstrip()
        == TaskEvent.objects.attempt_text(task.pk, 2).rstrip()
    )
    assert saved.count(partial[:40]) == 1  # the dead attempt's text is not prepended
    assert stored_files("results") == [f"{task.result_id}.md"]


def test_sigterm_stops_claiming_and_lets_the_running_attempt_finish(make_task, spawn_worker):
    running = make_task()
    worker = spawn_worker(
        slots=1, REPORTS_SIMULATED_TTFT_S="0", REPORTS_SIMULATED_TOKENS_PER_S="100"
    )
    wait_for(
        lambda: TaskEvent.objects.filter(task=running, type="delta").exists(),
        "the worker to start streaming",
    )
    waiting = make_task()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    assert Task.objects.get(pk=running.pk).status == "succeeded"
    assert Task.objects.get(pk=waiting.pk).status == "queued"  # handed on, never half-run


def test_on_an_object_store_a_killed_worker_is_replaced_by_one_with_a_fresh_disk(
    object_store, make_task, spawn_worker, tmp_path
):
    """Web (this process) and each worker have a data directory of their own; the
    replacement never saw the first worker's disk, and no task file is left on any."""
    task = make_task()
    pace = {"REPORTS_SIMULATED_TTFT_S": "0", "REPORTS_SIMULATED_TOKENS_PER_S": "40"}
    disks = [tmp_path / "worker-1", tmp_path / "worker-2"]
    first = spawn_worker(data_dir=disks[0], **pace)
    wait_for(
        lambda: TaskEvent.objects.filter(task=task, type="delta").count() >= 3,
        "the first worker to stream some text",
    )
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    spawn_worker(data_dir=disks[1], **pace)

    wait_for(
        lambda: Task.objects.filter(pk=task.pk, status="succeeded").exists(),
        "the task to succeed on the replacement",
    )
    assert report_body(saved_report(task)) == TaskEvent.objects.attempt_text(task.pk, 2).rstrip()
    assert stored_files("results") == [f"{task.result_id}.md"]
    assert stored_files("uploads") == [task.documents.get().storage_name]
    for disk in [Path(settings.REPORTS_STORAGE_DIR), *disks]:
        assert files_under(disk) == []


def reportworker_refusing(*options: str, **environment: str) -> str:
    """Run `manage.py reportworker --slots 1 <options>`, which must refuse to start;
    return what it wrote on standard error."""
    result = subprocess.run(
        [sys.executable, "manage.py", "reportworker", "--slots", "1", *options],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SECRET_KEY": "test-only", **environment},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    return result.stderr


def test_behind_a_transaction_pooler_without_a_direct_listen_url_it_refuses_to_start():
    stderr = reportworker_refusing(
        DATABASE_URL="postgres://postgres@127.0.0.1:6432/reportline",
        REPORTS_DATABASE_POOLING="transaction",
        REPORTS_LISTEN_DATABASE_URL="",
    )
    assert "REPORTS_LISTEN_DATABASE_URL" in stderr


@pytest.mark.parametrize("lanes", ["fast", "short;long", ""])
def test_lanes_that_name_no_lane_stop_the_worker_instead_of_leaving_it_idle(lanes):
    # Before, such a worker started, claimed nothing, and said nothing about why.
    stderr = reportworker_refusing("--lanes", lanes)
    assert f"--lanes takes short, long or both (short,long), not {lanes!r}" in stderr


@pytest.mark.parametrize("option", ["--health-port", "--metrics-port"])
def test_a_port_already_taken_stops_the_worker_naming_the_option(option):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        stderr = reportworker_refusing(option, str(port))
    # The error is looked for, not taken as the last line: a log line of the starting
    # worker (a stall its watchdog saw while it imported, on a busy machine) may follow it.
    errors = [line for line in stderr.splitlines() if line.startswith("CommandError:")]
    assert errors, stderr
    assert errors[-1].startswith(f"CommandError: {option} {port}")
    assert "in use" in errors[-1]


def probe(port: int, path: str) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        connection.close()


def test_a_worker_answers_health_and_readiness_probes_on_its_port(spawn_worker):
    ready_port, stranded_port = free_port(), free_port()
    spawn_worker(slots=1, extra=["--health-port", str(ready_port)])
    stranded = spawn_worker(
        slots=1,
        extra=["--health-port", str(stranded_port)],
        DATABASE_URL=f"postgres://nobody@127.0.0.1:{free_port()}/gone",
    )
    wait_for_port(ready_port, timeout=30)
    assert wait_for(lambda: probe(ready_port, "/readyz")[0] == 200, "the worker to be ready")
    assert probe(ready_port, "/readyz") == (200, {"status": "ready"})
    assert probe(ready_port, "/healthz") == (200, {"status": "ok"})

    # A worker that cannot reach its database is alive, and never ready.
    wait_for_port(stranded_port, timeout=30)
    assert probe(stranded_port, "/healthz") == (200, {"status": "ok"})
    assert probe(stranded_port, "/readyz") == (503, {"status": "unavailable"})
    assert stranded.poll() is None


def children_of(pid: int) -> list[int]:
    """Return the processes `pid` started (its parse sandbox), from /proc."""
    found = []
    for thread in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (thread / "children").read_text().split()]
    return found


def test_a_worker_killed_while_parsing_hands_the_document_to_no_other(alice, spawn_worker):
    # A flood of PDF operators: its parse takes many seconds of a CPU.
    pdf = Upload("flood.pdf", ".pdf", hostile.pdf_that_explodes())
    task, _ = submissions.submit(alice, Submission((pdf,), "", "ok", None))
    limits = {"REPORTS_PARSE_CPU_S": "30", "REPORTS_PARSE_TIMEOUT_S": "60"}
    reader = spawn_worker(**limits)
    wait_for(
        lambda: Attempt.objects.filter(task=task, parsing_since__isnull=False).exists(),
        "the worker to start reading the document",
    )
    sandboxes = children_of(reader.pid)
    reader.send_signal(signal.SIGKILL)  # as a document that kills its reader would
    reader.wait(timeout=10)
    for sandbox in sandboxes:
        os.kill(sandbox, signal.SIGKILL)  # no need to let it burn its CPU limit

    spawn_worker(**limits)  # finds the lease of a dead worker of this host
    wait_for(
        lambda: Task.objects.filter(pk=task.pk, status="failed").exists(),
        "the other worker to end the task",
        timeout=30,
    )
    task.refresh_from_db()
    assert (task.error_type, task.user_message) == ("invalid_input", POISON)
    assert [(a.status, a.error_type) for a in Attempt.objects.filter(task=task)] == [
        ("failed", "invalid_input")
    ]  # one attempt: never read again


def test_a_worker_serves_its_own_event_loop_figures_on_its_metrics_port(spawn_worker):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    spawn_worker(1, extra=("--metrics-port", str(port)))

    def lag_samples() -> float:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as reply:
                text = reply.read().decode()
        except OSError:
            return 0  # not listening yet
        families = {f.name: f for f in text_string_to_metric_families(text)}
        lag = families["reportline_event_loop_lag_seconds"].samples
        return next(s.value for s in lag if s.name.endswith("_count"))

    wait_for(lag_samples, "the worker's loop lag on its metrics port", timeout=30)
