"""Shared fixtures: a cast of users (alice owns, bob is refused), clients, a worker."""

from __future__ import annotations

import pytest
from django.test import Client

from reports.clock import FakeClock
from reports.models import ApiToken, Task
from reports.worker.supervisor import Supervisor
from tests.helpers import (
    SAMPLE,
    ScriptedProvider,
    local_storage,
    make_submission,
    run_all,
    silent,
)


@pytest.fixture(autouse=True)
def private_storage(settings, tmp_path):
    settings.REPORTS_STORAGE_DIR = tmp_path / "files"
    settings.STORAGES = {**settings.STORAGES, "reports": local_storage(tmp_path / "files")}
    settings.REPORTS_ALLOW_SCENARIOS = True
    settings.REPORTS_EMBEDDED_WORKER = False


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
