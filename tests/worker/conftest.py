"""Fixtures of the worker's tests: reportworker processes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from tests.helpers import database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spawn_worker(tmp_path, settings):
    """Return a starter of reportworker processes sharing this test's database and files."""
    settings.REPORTS_STORAGE_DIR = tmp_path / "files"
    processes = []

    def spawn(slots: int = 2, *args: str, **env) -> subprocess.Popen:
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "DJANGO_SECRET_KEY": "test-only",
            "DATABASE_URL": database_url(connection.settings_dict),
            "REPORTS_DATA_DIR": str(tmp_path),
            "REPORTS_LEASE_S": "2",
            "REPORTS_POLL_S": "0.05",
            **env,
        }
        process = subprocess.Popen(
            [sys.executable, "manage.py", "reportworker", "--slots", str(slots), *args],
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
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
