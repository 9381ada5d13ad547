"""The demo as a visitor meets it: its users survive a restart signed in, and errors are
the product's own pages, never Django's debug page."""

import http.client
import io
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.commands import migrate
from django.test import Client

from reports import presentation
from tests.helpers import free_port, submit, task_of, wait_for_port

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[1]


def signed_in(client: Client) -> bool:
    return client.get("/").status_code == 200


def test_a_restart_keeps_the_demo_users_signed_in():
    call_command("demo_users")
    client = Client()
    assert client.login(username="alice", password="alice-demo-pass")
    call_command("demo_users")  # the demo starting again
    assert signed_in(client)


def test_a_demo_password_that_no_longer_works_is_reset():
    call_command("demo_users")
    bob = get_user_model().objects.get(username="bob")
    bob.set_password("forgotten")
    bob.save()
    call_command("demo_users")
    assert Client().login(username="bob", password="bob-demo-pass")
    alice = get_user_model().objects.get(username="alice")
    assert (alice.is_staff, bob.is_staff) == (True, False)


def test_a_second_demo_start_skips_the_setup_already_done(monkeypatch):
    call_command("demo_setup")  # the first start: the users are made
    assert Client().login(username="alice", password="alice-demo-pass")

    def not_again(*args, **kwargs):
        raise AssertionError("a restart redid a setup step")

    # A restart neither migrates an up-to-date database nor hashes a password again.
    monkeypatch.setattr(migrate.Command, "handle", not_again)
    monkeypatch.setattr(get_user_model(), "set_password", not_again)
    monkeypatch.setattr(get_user_model(), "check_password", not_again)
    out = io.StringIO()
    call_command("demo_setup", stdout=out)
    assert "migrations: up to date" in out.getvalue()


@pytest.fixture
def production(settings):
    settings.DEBUG = False


def test_someone_elses_task_and_a_missing_page_show_the_products_page(
    production, alice_client, bob_client
):
    task = task_of(submit(alice_client))
    for response in (
        bob_client.get(f"/tasks/{task.pk}/"),
        alice_client.get(f"/tasks/{uuid.uuid4()}/"),
        alice_client.get("/no/such/page/"),
    ):
        assert response.status_code == 404
        assert b'data-error-page="404"' in response.content
        assert b"Your reports" in response.content


def test_a_server_error_shows_the_products_page(production, alice_client, monkeypatch):
    task = task_of(submit(alice_client))

    def broken(task):
        raise RuntimeError("a bug")

    monkeypatch.setattr(presentation, "page_context", broken)
    alice_client.raise_request_exception = False
    response = alice_client.get(f"/tasks/{task.pk}/")
    assert response.status_code == 500
    assert b'data-error-page="500"' in response.content
    assert b"a bug" not in response.content


def test_a_second_demo_on_a_port_in_use_says_so_and_stops(tmp_path):
    # The server would announce itself, log that it cannot listen, and wait for ever.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        demo = subprocess.Popen(
            [str(ROOT / "scripts" / "demo")],
            env={**os.environ, "PORT": str(port), "REPORTS_DATA_DIR": str(tmp_path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, stderr = demo.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.communicate()
            pytest.fail("the demo did not stop on a port in use")
    assert demo.returncode == 1
    assert f"Port {port} of 127.0.0.1 is already in use" in stderr
    assert time.monotonic() - started < 10  # before any install or set-up


def test_the_demo_server_gives_a_refusal_its_reason_phrase(tmp_path):
    # Twisted's table of reasons has no 429: daphne answered "429 Unknown Status".
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DJANGO_DEBUG": "1",
        "REPORTS_DATA_DIR": str(tmp_path),
        "REPORTS_EMBEDDED_WORKER": "0",
        "REPORTS_SHARE_RATE_LIMIT": "1",
    }
    command = ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "project.asgi:application"]
    server = subprocess.Popen(
        [sys.executable, *command],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, 30)
        replies = []
        for _ in range(2):  # the second is one too many for the shared pages' limit
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("GET", "/shared/no-such-link/")
            reply = connection.getresponse()
            replies.append((reply.status, reply.reason))
            connection.close()
    finally:
        server.kill()
        server.wait(timeout=10)
    assert replies[1] == (429, "Too Many Requests")
