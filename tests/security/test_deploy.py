"""Run securely behind TLS: with DEBUG off the defaults are HTTPS-only, and Django's own
deployment check finds nothing to warn about in the production layout (docs/security.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION = {
    "DJANGO_SETTINGS_MODULE": "project.settings",
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "k7#Qm2!vX9pL4@wZ8&rT1^yN6*bH3$cJ5%dF0(gS)eA-uI+oP=lK~jM{nB}hV[xC]",
    "DJANGO_ALLOWED_HOSTS": "reports.example.com",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://reports.example.com",
    "DJANGO_TLS_PROXY": "1",
    "DATABASE_URL": "postgres://reportline@127.0.0.1:5432/reportline",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "REPORTS_EMBEDDED_WORKER": "0",
}


def run(tmp_path, args: list[str], **env: str) -> subprocess.CompletedProcess:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "REPORTS_"))
    }
    environ |= {"REPORTS_DATA_DIR": str(tmp_path), **PRODUCTION, **env}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


def test_the_deployment_check_finds_nothing_in_the_production_layout(tmp_path):
    done = run(tmp_path, ["manage.py", "check", "--deploy", "--fail-level", "DEBUG"])
    assert done.returncode == 0, done.stderr
    assert "System check identified no issues" in done.stdout, done.stdout + done.stderr


PROBE = """
import json, django
django.setup()
from django.test import Client
client = Client(HTTP_HOST="reports.example.com")
plain = client.get("/accounts/login/")
proxied = client.get("/accounts/login/", HTTP_X_FORWARDED_PROTO="https")
cookie = proxied.cookies["csrftoken"]
print(json.dumps({
    "plain": [plain.status_code, plain.get("Location")],
    "proxied": proxied.status_code,
    "hsts": proxied.get("Strict-Transport-Security"),
    "secure_cookie": bool(cookie["secure"]),
}))
"""


def test_with_debug_off_the_site_is_https_only(tmp_path):
    done = run(tmp_path, ["-c", PROBE])
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Plain HTTP is sent to HTTPS; through the TLS proxy the page is served...
    assert seen["plain"] == [301, "https://reports.example.com/accounts/login/"]
    assert seen["proxied"] == 200
    # ...with its cookies for HTTPS only, and browsers told to keep to HTTPS.
    assert seen["secure_cookie"]
    assert seen["hsts"] == "max-age=31536000; includeSubDomains; preload"


PROBES = """
import json, os, django
django.setup()
from django.test import Client
client = Client(HTTP_HOST="127.0.0.1")
print(json.dumps({p: client.get(p).status_code for p in ("/healthz", "/readyz")}), flush=True)
os._exit(0)  # not waiting for the pool's attempts to reach a database that is not there
"""


def test_probes_over_plain_http_get_their_answer_not_a_redirect(tmp_path):
    # Balancers and orchestrators probe a web process directly, over plain HTTP, and count
    # a 301 as a pass: a process whose database is down must answer 503, not redirect.
    done = run(
        tmp_path,
        ["-c", PROBES],
        DJANGO_ALLOWED_HOSTS="127.0.0.1",
        DATABASE_URL="postgres://reportline@127.0.0.1:9/reportline",  # nothing listens
        REPORTS_DB_POOL_TIMEOUT_S="0.5",
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"/healthz": 200, "/readyz": 503}


@pytest.mark.parametrize(
    ("mistake", "named"),
    [
        ({"DJANGO_SECRET_KEY": ""}, "DJANGO_SECRET_KEY is required"),
        ({"DJANGO_DEBUG": "maybe"}, "DJANGO_DEBUG must be a boolean"),
        ({"DATABASE_URL": "postgres//reportline:s3cret@db/reportline"}, "DATABASE_URL must"),
        ({"DATABASE_URL": "postgres://reportline:s3cret@db:port/reportline"}, "DATABASE_URL"),
        ({"DATABASE_URL": "mysql://reportline:s3cret@db/reportline"}, "PostgreSQL"),
        ({"REDIS_URL": "127.0.0.1:6379"}, "REDIS_URL must start with redis://"),
        ({"REPORTS_LOG_LEVEL": "loud"}, "REPORTS_LOG_LEVEL must be DEBUG, INFO"),
    ],
)
def test_a_setting_an_operator_got_wrong_stops_start_up_naming_it(tmp_path, mistake, named):
    done = run(tmp_path, ["manage.py", "check"], **mistake)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured: "), done.stderr
    assert named in last
    assert "s3cret" not in done.stderr  # a URL's password never reaches the log


def test_the_asgi_application_refuses_to_load_when_a_system_check_fails(tmp_path):
    # uvicorn runs no system checks: without this, the web process started and answered
    # every upload with a 500 (a model with no price cannot reserve a budget).
    done = run(tmp_path, ["-c", "import project.asgi"], REPORTS_MODEL="unpriced-model")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()
    assert (
        "ImproperlyConfigured: ?: (reports.E002) No price for REPORTS_MODEL='unpriced-model'"
        in ("\n".join(last[-3:]))
    )


def test_a_web_process_with_debug_left_on_says_so_in_its_log(tmp_path):
    done = run(tmp_path, ["-c", "import project.asgi"], DJANGO_DEBUG="1")
    assert done.returncode == 0, done.stderr
    [line] = [json.loads(line) for line in done.stderr.splitlines() if "DJANGO_DEBUG" in line]
    assert line["level"] == "warning"
    assert line["event"].startswith("DJANGO_DEBUG is on, never in production")


def test_a_log_level_in_lower_case_is_understood(tmp_path):
    # logging itself knows only "DEBUG": "debug" ended start-up in a traceback that said
    # "Unable to configure logger 'reports'" and named no setting.
    done = run(tmp_path, ["manage.py", "check"], REPORTS_LOG_LEVEL="debug")
    assert done.returncode == 0, done.stderr


def test_a_database_that_cannot_be_reached_ends_a_command_with_one_line_naming_why(tmp_path):
    # The pool said only "couldn't get a connection after 5.00 sec", at the end of a
    # traceback, and its threads wrote logging errors while Python shut down.
    port = free_port()  # nothing listens on it
    done = run(
        tmp_path,
        ["manage.py", "migrate"],
        DATABASE_URL=f"postgres://reportline:s3cret@127.0.0.1:{port}/reportline",
        REPORTS_DB_POOL_TIMEOUT_S="0.2",
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"manage.py migrate: the PostgreSQL server of DATABASE_URL (127.0.0.1:{port}, "
        "database 'reportline') cannot be reached: "
    ), done.stderr
    assert "Connection refused" in last
    assert "Traceback" not in done.stderr
    assert "Logging error" not in done.stderr
    assert "s3cret" not in done.stderr
