"""The limits table of docs/security.md against the code: each default is the code's own,
each line names a test that exists; and the limits that had no test of their own."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import cache

from reports import api
from reports.models import Task
from reports.parsers import docx, ocr
from reports.serving import paging
from reports.sharing import links
from reports.streaming import credentials
from reports.worker import loops
from tests.helpers import SAMPLE, assert_refused, run_all, submit, task_of, upload

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
MB = 1024 * 1024
# The constants a line names instead of a setting, as the table states them.
CONSTANTS = {
    "MAX_ENTRIES": docx.MAX_ENTRIES,
    "MAX_UNCOMPRESSED_BYTES": docx.MAX_UNCOMPRESSED_BYTES / MB,
    "MAX_COMPRESSION_RATIO": docx.MAX_COMPRESSION_RATIO,
    "RATIO_EXEMPT_BYTES": docx.RATIO_EXEMPT_BYTES / MB,
    "MAX_PAGE": paging.MAX_PAGE,
    "MAX_DAYS": links.MAX_DAYS,
    "MAX_PAGES": ocr.MAX_PAGES,
    "PAGE_S": ocr.PAGE_S,
    "UPLOAD_ALLOWANCE_MS": api.UPLOAD_ALLOWANCE_MS / 1000,
    "MAX_FIRST_TEXT_MS": api.MAX_FIRST_TEXT_MS / 1000,
    "QUIET": loops.QUIET,
    "REPEATS": loops.REPEATS,
    "WINDOW": loops.WINDOW,
    "RECHECK_S": credentials.RECHECK_S,
}


def limits_table() -> list[dict[str, str]]:
    text = (ROOT / "docs/security.md").read_text()
    section = text.split("## Limits and their settings", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    return [
        dict(zip(header, (cell.strip() for cell in row.strip("|").split("|")), strict=True))
        for row in rows[2:]
    ]


def numbers(cell: str) -> set[float]:
    return {float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", cell)}


def default_settings() -> dict[str, float]:
    """The settings as a server with no REPORTS_ variable in its environment reads them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPORTS_", "DJANGO_"))}
    env["DJANGO_SECRET_KEY"] = "k" * 60
    env["REPORTS_DATA_DIR"] = str(Path(os.environ.get("TMPDIR", "/tmp")) / "limits-defaults")
    script = (
        "import json, project.settings as s; print(json.dumps({k: getattr(s, k) for k in dir(s)"
        " if k.startswith('REPORTS_') and type(getattr(s, k)) in (int, float)}))"
    )
    found = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
    values = json.loads(found.stdout)
    values["REPORTS_DEFAULT_BUDGET_USD"] = values.pop("REPORTS_DEFAULT_BUDGET_MICROS") / 1e6
    return values


def test_each_default_in_the_limits_table_is_the_codes_own():
    defaults = default_settings()
    nginx = (ROOT / "deploy/nginx.conf").read_text()
    CONSTANTS["client_max_body_size"] = float(
        re.search(r"client_max_body_size\s+(\d+)m;", nginx)[1]
    )
    checked = 0
    for row in limits_table():
        named = re.findall(r"`([A-Za-z_]+)`", row["setting"])
        stated = numbers(row["default"])
        for name in named:
            value = defaults[name] if name.startswith("REPORTS_") else CONSTANTS[name]
            assert value in stated, f"{row['limit']}: {name} is {value}, not {row['default']}"
            checked += 1
    assert checked >= 20


def test_each_line_of_the_limits_table_names_a_test_that_exists():
    for row in limits_table():
        named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row["test"])
        assert named, f"{row['limit']}: no test named"
        for path, name in named:
            tree = ast.parse((ROOT / path).read_text())
            functions = {
                node.name
                for node in ast.walk(tree)
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            assert name in functions, f"{row['limit']}: {path}::{name} does not exist"


# --- limits that had no test of their own ---------------------------------------------------


def test_instructions_over_the_limit_are_refused(alice_client):
    """4,000 characters by default: one more is refused and nothing is created."""
    too_long = submit(alice_client, upload(), instructions="x" * 4001)
    assert_refused(too_long, 400, "invalid_request", "4000 characters")
    assert not Task.objects.exists()
    assert submit(alice_client, upload(), instructions="x" * 4000).status_code == 201


def test_a_report_over_the_size_limit_is_not_saved(alice_client, worker, settings):
    settings.REPORTS_MAX_REPORT_KB = 1
    task = task_of(submit(alice_client, upload("long.md", SAMPLE * 4)))
    run_all(worker)
    task.refresh_from_db()
    assert (task.status, task.error_type, task.result_id) == ("failed", "validation_failed", None)
    assert "the limit is 1 KiB" in task.attempts.get().error_message


@pytest.fixture
def fresh_throttle():
    cache.clear()
    yield
    cache.clear()


def test_five_failed_logins_lock_the_account_for_fifteen_minutes(client, alice, fresh_throttle):
    """The defaults: REPORTS_LOGIN_MAX_FAILURES 5, REPORTS_LOGIN_LOCKOUT_S 900."""
    for _ in range(4):
        assert (
            client.post("/accounts/login/", {"username": "alice", "password": "no"}).status_code
            == 200
        )
    refused = client.post("/accounts/login/", {"username": "alice", "password": "alice-pass"})
    assert refused.status_code == 302  # four failures: not locked yet
    client.logout()
    for _ in range(5):
        client.post("/accounts/login/", {"username": "alice", "password": "no"})
    refused = client.post("/accounts/login/", {"username": "alice", "password": "alice-pass"})
    assert refused.status_code == 429
    assert "Try again in 15 minute(s)" in refused.content.decode()
