"""A request to a synchronous view runs its middleware and view in one trip to a thread;
an asynchronous view keeps Django's async chain."""

from __future__ import annotations

import pytest
from asgiref import sync
from channels.testing import HttpCommunicator

from project.asgi import application
from reports.serving.handler import is_async_view

pytestmark = pytest.mark.django_db(transaction=True)


async def get(path: str, monkeypatch) -> tuple[dict, list[str]]:
    """GET `path` through the site's ASGI application; return the response and the names of
    the functions it sent to a thread."""
    trips: list[str] = []
    original = sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        trips.append(getattr(self.func, "__name__", repr(self.func)))
        return await original(self, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(sync.SyncToAsync, "__call__", counted)
        headers = [(b"host", b"testserver")]
        response = await HttpCommunicator(application, "GET", path, headers=headers).get_response()
    return response, trips


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
    assert is_async_view("/healthz")
    assert is_async_view("/api/tasks/00000000-0000-0000-0000-000000000000/events")
    assert not is_async_view("/api/tasks")
    assert not is_async_view("/accounts/login/")
    assert not is_async_view("/no/such/page/")
