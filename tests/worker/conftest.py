"""Fixtures of the worker's tests: reportworker processes, reaching PostgreSQL directly or
through PgBouncer in transaction pooling."""

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers import database_url, free_port, wait_for_port

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
