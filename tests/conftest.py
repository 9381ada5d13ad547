"""Shared fixtures: a cast of users (alice owns, bob is refused), clients, a worker."""

from __future__ import annotations

import io

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from reports import submissions
from reports.clock import FakeClock
from reports.models import ApiToken, Task
from reports.providers.base import Completed, Provider, TextDelta, Usage
from reports.submissions import Submission, Upload
from reports.worker import Supervisor

SAMPLE = (
    "# Tidal energy in small harbours\n\n"
    "Tidal energy is a predictable source of power. Small harbours see two tides a day, "
    "and the difference between high and low water can drive a turbine. Engineers in "
    "Brittany measured the flow at twelve sites over a year.\n\n"
    "## Findings\n\n"
    "The best sites had narrow entrances that speed up the flow. Turbines placed there "
    "produced steady power for eight hours a day. Maintenance costs were lower than "
    "expected because the water is sheltered.\n"
)

# Every route about one task; each must answer another user exactly as a missing task.
TASK_ROUTES = [
    ("get", "/api/tasks/{id}"),
    ("get", "/api/tasks/{id}/events"),
    ("get", "/api/tasks/{id}/result"),
    ("post", "/api/tasks/{id}/cancel"),
    ("post", "/api/tasks/{id}/timing"),
]


@pytest.fixture(autouse=True)
def private_storage(settings, tmp_path):
    settings.REPORTS_STORAGE_DIR = tmp_path / "files"
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


def upload(name: str = "article.md", content: str | bytes = SAMPLE):
    data = content.encode() if isinstance(content, str) else content
    f = io.BytesIO(data)
    f.name = name
    return f


def submit(client: Client, *files, headers=None, **fields):
    """POST /api/tasks with the given uploads (a sample .md when none) and fields."""
    payload = {"files": list(files) or [upload()], **fields}
    return client.post("/api/tasks", payload, headers=headers or {})


def run_all(worker: Supervisor) -> None:
    """Claim and run tasks until nothing more can be claimed now."""

    async def go():
        while await worker.claim_and_start():
            await worker.drain()
        await worker.drain()

    async_to_sync(go)()


def task_of(response) -> Task:
    return Task.objects.get(pk=response.json()["task_id"])


class ScriptedProvider(Provider):
    """A provider whose stream is an async generator function the test writes."""

    name = "scripted"

    def __init__(self, script, clock) -> None:
        super().__init__(clock=clock)
        self.script = script

    def stream(self, request):
        return self.script(request, self.clock)


@pytest.fixture
def scripted_worker(clock):
    """Return a factory: a worker whose provider runs the given script."""

    def make(script) -> Supervisor:
        return Supervisor(slots=4, clock=clock, provider=ScriptedProvider(script, clock))

    return make


REPORT = "# Report\n\n## Summary\n\nIt works.\n\n## Details\n\nMore text.\n"


async def whole_report(request, clock):
    """A well-behaved stream: the report in small pieces, then the completion signal."""
    for i in range(0, len(REPORT), 8):
        yield TextDelta(REPORT[i : i + 8])
        await clock.sleep(0.05)
    yield Completed("stop", Usage(10, 20, None, "provider"), request_id="req-1")


def make_submission(owner, content: str = SAMPLE, scenario: str = "ok") -> Task:
    """Create a queued task through the real submit path."""
    submission = Submission((Upload("doc.md", ".md", content.encode()),), "", scenario, None)
    task, _ = submissions.submit(owner, submission)
    return task


@pytest.fixture
def make_task(alice):
    """Return a factory of queued tasks, alice's unless another owner is given."""

    def make(content: str = SAMPLE, scenario: str = "ok", owner=None) -> Task:
        return make_submission(owner or alice, content, scenario)

    return make


async def silent(request, clock):
    """Answer nothing until past a 60 s response timeout: the outcome is unknown."""
    await clock.sleep(61)
    yield TextDelta("too late")


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
