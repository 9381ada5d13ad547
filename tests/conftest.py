"""Shared fixtures: a cast of users (alice owns, bob is refused), clients, a worker."""

from __future__ import annotations

import io
import logging

import pytest
from asgiref.sync import async_to_sync
from django.db import connections
from django.test import Client

from reports import lanes
from reports.clock import FakeClock
from reports.models import ApiToken, Task
from reports.observability.logs import JsonFormatter
from reports.worker.supervisor import Supervisor
from tests.helpers import SAMPLE, ScriptedProvider, make_submission, run_all, silent


@pytest.fixture(autouse=True)
def private_storage(settings, tmp_path):
    settings.REPORTS_STORAGE_DIR = tmp_path / "files"
    settings.REPORTS_ALLOW_SCENARIOS = True
    settings.REPORTS_EMBEDDED_WORKER = False


@pytest.fixture(autouse=True)
def worker_lane_in_test_transaction(request, monkeypatch):
    """Run the worker's own lane on the shared database thread in a test that runs inside
    one transaction: its rows exist on that connection only, and it holds the lock."""
    marker = request.node.get_closest_marker("django_db")
    transactional = "transactional_db" in request.fixturenames or (
        marker is not None and (marker.kwargs.get("transaction") or marker.args[:1] == (True,))
    )
    if not transactional:
        monkeypatch.setattr(lanes, "on_worker_lane", lanes.on_shared_db)
        yield
        return
    yield
    # The lane's thread outlives the test: its connection must not hold the test database.
    async_to_sync(lanes.on_worker_lane(connections.close_all))()


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-pass")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="bob-pass")


@pytest.fixture
def alice_client(alice) -> Client:
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(bob) -> Client:
    client = Client()
    client.force_login(bob)
    return client


@pytest.fixture
def alice_token(alice) -> str:
    return ApiToken.objects.issue(alice)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def worker(clock) -> Supervisor:
    return Supervisor(slots=4, clock=clock)


@pytest.fixture
def scripted_worker(clock):
    """Return a factory: a worker whose provider runs the given script."""

    def make(script) -> Supervisor:
        return Supervisor(slots=4, clock=clock, provider=ScriptedProvider(script, clock))

    return make


@pytest.fixture
def logged():
    """The stream of the handler settings.LOGGING configures, as the server writes it."""
    handler = logging.getLogger("reports").handlers[0]
    assert isinstance(handler.formatter, JsonFormatter)
    stream = io.StringIO()
    previous = handler.setStream(stream)
    yield stream
    handler.setStream(previous)


@pytest.fixture
def make_task(alice):
    """Return a factory of queued tasks, alice's unless another owner is given."""

    def make(content: str = SAMPLE, scenario: str = "ok", owner=None) -> Task:
        return make_submission(owner or alice, content, scenario)

    return make


@pytest.fixture
def unanswered_task(make_task, scripted_worker, settings) -> Task:
    """Alice's task whose provider never answered once the request was sent: it waits in
    reconciliation_required with its reservation still held."""
    settings.REPORTS_PROVIDER_RESPONSE_TIMEOUT_S = 60
    task = make_task()
    run_all(scripted_worker(silent))
    task.refresh_from_db()
    return task


def pytest_collection_modifyitems(config, items):
    """Run browser tests last: Playwright's sync API keeps an event loop running in this
    thread for the rest of the session, where no async test could run."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
