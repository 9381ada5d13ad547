"""A request to a synchronous view runs its middleware and view in one trip to a thread,
kept for the next request; an asynchronous view keeps Django's async chain."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
import warnings

import pytest
from asgiref import sync
from channels.testing import HttpCommunicator
from django.core.signals import request_started
from django.db import connection

from project.asgi import application, django_asgi_app
from reports import storage, submissions
from reports.models import ApiToken, Task
from reports.serving import admissions
from reports.serving.handler import RequestThreads, is_async, view_of
from tests.helpers import make_submission, multipart

pytestmark = pytest.mark.django_db(transaction=True)


async def get(path: str, monkeypatch, headers=()) -> tuple[dict, list[str]]:
    """GET `path` through the site's ASGI application; return the response and the names of
    the functions it sent to a thread."""
    trips: list[str] = []
    original = sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        trips.append(getattr(self.func, "__name__", repr(self.func)))
        return await original(self, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(sync.SyncToAsync, "__call__", counted)
        headers = [(b"host", b"testserver"), *headers]
        response = await HttpCommunicator(application, "GET", path, headers=headers).get_response()
    return response, trips


@pytest.fixture
def saved_report(alice) -> tuple[Task, str, str]:
    """Alice's succeeded task with a report near the largest kept, and her API token."""
    task = make_submission(alice, "The document.", "ok")
    text = "# The report\n\n" + "A sentence of the report, said again.\n" * 4000
    task.result_id = uuid.uuid4()
    task.result_sha256, task.result_bytes = storage.save_result(task.result_id, text)
    task.status = "succeeded"
    task.save()
    return task, text, ApiToken.objects.issue(alice)


async def test_a_report_downloads_whole_in_one_trip_and_warns_of_nothing(saved_report, monkeypatch):
    # Streamed from its file, a report of 150 KB took a trip to a thread for every 4 KB
    # read, and Django warned of it in the server's log at each process's first download.
    task, text, token = saved_report
    authorization = [(b"authorization", f"Bearer {token}".encode())]
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        response, trips = await get(f"/api/tasks/{task.pk}/result", monkeypatch, authorization)

    assert response["status"] == 200
    assert response["body"] == text.encode()
    headers = {name.lower(): value for name, value in response["headers"]}
    assert headers[b"content-length"] == str(len(text)).encode()
    assert trips.count("get_response") == 1 and len(trips) <= 4, trips
    assert [str(w.message) for w in warned] == []


async def test_a_page_runs_its_middleware_and_view_in_one_trip(monkeypatch):
    response, trips = await get("/accounts/login/", monkeypatch)

    assert response["status"] == 200
    assert b"csrfmiddlewaretoken" in response["body"]
    assert trips.count("get_response") == 1
    # Besides it only the request's start and end (the connections' care) and the close.
    assert len(trips) <= 4, trips


async def test_an_answer_a_middleware_gives_comes_back_from_the_same_trip(monkeypatch):
    response, trips = await get("/tasks/00000000-0000-0000-0000-000000000000/", monkeypatch)

    assert response["status"] == 302  # to the login page: the view's decorator answers
    assert trips.count("get_response") == 1


def test_only_the_asynchronous_views_keep_the_async_chain():
    assert is_async(view_of("/healthz"))
    assert is_async(view_of("/api/tasks/00000000-0000-0000-0000-000000000000/events"))
    assert not is_async(view_of("/api/tasks"))
    assert not is_async(view_of("/accounts/login/"))
    assert not is_async(view_of("/no/such/page/"))


async def test_requests_one_after_another_run_on_one_kept_thread(monkeypatch):
    """Django would start a thread for each request, and open a database connection on
    it: here the next request finds the last one's thread, and its connection, waiting."""
    # No thread kept by an earlier test's requests: the first request starts one.
    monkeypatch.setattr(django_asgi_app, "threads", RequestThreads())
    seen: list[tuple[int, bool]] = []

    def note(**_):  # a request starts, on its thread
        seen.append((threading.get_ident(), connection.connection is not None))
        connection.ensure_connection()

    request_started.connect(note)
    try:
        for _ in range(3):
            headers = [(b"host", b"testserver")]
            asked = HttpCommunicator(application, "GET", "/accounts/login/", headers=headers)
            assert (await asked.get_response())["status"] == 200
            await asked.wait()  # the request has ended, and given its thread back
    finally:
        request_started.disconnect(note)

    assert len({thread for thread, _ in seen}) == 1, seen
    if connection.vendor == "sqlite":  # PostgreSQL's go back to its pool after a request
        assert [opened for _, opened in seen] == [False, True, True]
    assert seen[0][0] != await sync.sync_to_async(threading.get_ident)()  # not the shared one


def test_a_request_never_waits_for_another_requests_thread():
    threads = RequestThreads(idle_max=1)
    first, second = threads.take(), threads.take()
    assert first is not second
    threads.give_back(first)
    threads.give_back(second)  # beyond the idle ones kept: shut down
    assert threads.take() is first
    assert second._shutdown


def test_a_thread_still_running_a_left_requests_view_is_not_kept():
    threads = RequestThreads()
    executor = threads.take()
    release = threading.Event()
    running = executor.submit(release.wait, 10)  # a view still at work, its client gone
    threads.give_back(executor)
    # The next request runs at once, not behind the view still at work.
    assert threads.take().submit(lambda: "answered").result(timeout=5) == "answered"
    assert not running.done()
    release.set()
    running.result(timeout=10)


async def test_task_creations_wait_their_turn_at_the_gate_and_pages_answer_meanwhile(
    alice_token, settings, monkeypatch
):
    """Creating a task takes the site's admission lock while holding a pooled connection:
    a process lets only REPORTS_ADMISSIONS_AT_ONCE creations in at a time, so a burst of
    uploads cannot take every connection from its pages and sockets."""
    settings.REPORTS_ADMISSIONS_AT_ONCE = 1
    locked = []  # each creation's arrival at the admission lock
    original = submissions._lock_admission
    monkeypatch.setattr(submissions, "_lock_admission", lambda: locked.append(1) or original())
    gate = admissions.gate("POST", view_of("/api/tasks"))
    body, content_type = multipart("notes.md", b"# Notes\n\nThe tide turns at noon.\n")
    headers = [
        (b"host", b"testserver"),
        (b"authorization", f"Bearer {alice_token}".encode()),
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body)).encode()),
    ]

    async with gate:  # another creation is in
        upload = HttpCommunicator(application, "POST", "/api/tasks", body=body, headers=headers)
        answer = asyncio.create_task(upload.get_response())
        for _ in range(2):  # pages go on meanwhile
            page = HttpCommunicator(application, "GET", "/accounts/login/", headers=headers[:1])
            assert (await page.get_response())["status"] == 200
        assert not locked and not answer.done()  # the upload waits, holding no connection

    response = await answer
    assert response["status"] == 201, response["body"]
    assert locked == [1]


async def test_only_a_post_that_creates_a_task_waits_at_the_gate(settings):
    settings.REPORTS_ADMISSIONS_AT_ONCE = 2
    creating = view_of("/api/tasks")
    held = [admissions.gate("POST", creating) for _ in range(2)]
    for gate in held:
        await gate.__aenter__()

    assert admissions.gate("POST", creating).locked()  # a third creation waits
    for method, path in [("GET", "/api/tasks"), ("POST", "/accounts/login/")]:
        assert isinstance(admissions.gate(method, view_of(path)), contextlib.nullcontext)
    await held[0].__aexit__(None, None, None)
    assert not admissions.gate("POST", creating).locked()
