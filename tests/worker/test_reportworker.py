"""`manage.py reportworker` as real processes: killed mid-stream, and stopped by SIGTERM;
reaching PostgreSQL directly and through PgBouncer in transaction pooling."""

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from reports.models import Attempt, Task, TaskEvent
from tests.helpers import (
    database_url,
    files_under,
    free_port,
    saved_report,
    stored_files,
    wait_for_port,
)

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


PGBOUNCER_CONFIG = """\
[databases]
* = host={host} port={port}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
auth_type = trust
auth_file = {folder}/users.txt
pool_mode = transaction
default_pool_size = 10
"""


@pytest.fixture(params=["direct", "pgbouncer"])
def database_route(request) -> Iterator[dict[str, str]]:
    """Return how workers reach the database: directly, or through PgBouncer (Debian's) in
    transaction pooling, LISTENing on a direct connection of their own."""
    direct = database_url(connection.settings_dict)
    if request.param == "direct":
        yield {"DATABASE_URL": direct}
        return
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if connection.vendor != "postgresql" or not Path(binary).exists():
        pytest.skip("PgBouncer runs in front of PostgreSQL, when Debian's pgbouncer is installed")
    db = connection.settings_dict
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)  # pgbouncer refuses root and reads this as postgres
        Path(folder, "users.txt").write_text(f'"{db["USER"]}" ""\n')
        config = Path(folder, "pgbouncer.ini")
        config.write_text(
            PGBOUNCER_CONFIG.format(
                host=db["HOST"], port=db["PORT"], listen_port=port, folder=folder
            )
        )
        user = ["-u", "postgres"] if os.getuid() == 0 else []
        pooler = subprocess.Popen([binary, *user, str(config)], stderr=subprocess.DEVNULL)
        try:
            wait_for_port(port, timeout=10)
            yield {
                "DATABASE_URL": direct.replace(f":{db['PORT']}/", f":{port}/"),
                "REPORTS_DATABASE_POOLING": "transaction",
                "REPORTS_LISTEN_DATABASE_URL": direct,
            }
        finally:
            pooler.terminate()
            pooler.wait(timeout=10)


@pytest.fixture
def spawn_worker(tmp_path, settings, database_route):
    """Return a starter of reportworker processes sharing this test's database and files."""
    processes = []

    def spawn(
        slots: int = 2, data_dir: Path = tmp_path, extra: tuple = (), **env
    ) -> subprocess.Popen:
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "DJANGO_SECRET_KEY": "test-only",
            **database_route,
            "REPORTS_DATA_DIR": str(data_dir),
            "REPORTS_LEASE_S": "2",
            "REPORTS_POLL_S": "0.05",
            **env,
        }
        process = subprocess.Popen(
            [sys.executable, "manage.py", "reportworker", "--slots", str(slots), *extra],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            text=True,
        )
        processes.append(process)
        return process

    yield spawn
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def wait_for(condition, what: str, timeout: float = 60):
    """Poll the database until `condition()` is true (bounded), and return its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


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
    assert saved == second.text == TaskEvent.objects.attempt_text(task.pk, 2)
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
    assert saved_report(task) == TaskEvent.objects.attempt_text(task.pk, 2)
    assert stored_files("results") == [f"{task.result_id}.md"]
    assert stored_files("uploads") == [task.documents.get().storage_name]
    for disk in [Path(settings.REPORTS_STORAGE_DIR), *disks]:
        assert files_under(disk) == []


def test_behind_a_transaction_pooler_without_a_direct_listen_url_it_refuses_to_start():
    environment = {
        **os.environ,
        "DJANGO_SECRET_KEY": "test-only",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:6432/reportline",
        "REPORTS_DATABASE_POOLING": "transaction",
        "REPORTS_LISTEN_DATABASE_URL": "",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "reportworker", "--slots", "1"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "REPORTS_LISTEN_DATABASE_URL" in result.stderr


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
