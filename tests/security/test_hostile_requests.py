"""Numbers, caching and malformed bodies a client controls: each is bounded or refused with
a docs/api.md error body, never a 500, and no private answer may be kept by a cache."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

from reports.models import Task
from tests.helpers import assert_refused, submit

pytestmark = pytest.mark.django_db


def report_timing(client: Client, task: Task, body: str):
    return client.post(f"/api/tasks/{task.pk}/timing", body, "application/json")


# --- numbers from clients -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e308", "3600001", "1e12"])
def test_a_first_text_time_beyond_an_hour_is_refused_and_not_stored(
    alice_client, finished_task, value
):
    response = report_timing(alice_client, finished_task, f'{{"frontend_first_text_ms": {value}}}')
    assert_refused(response, 400, "invalid_request", "frontend_first_text_ms")
    finished_task.refresh_from_db()
    assert finished_task.frontend_first_text_ms is None


def test_a_first_text_time_longer_than_the_task_has_existed_is_refused(alice_client, finished_task):
    # The task is a few seconds old: half an hour cannot have passed since its submit.
    response = report_timing(alice_client, finished_task, '{"frontend_first_text_ms": 1800000}')
    assert_refused(response, 400, "invalid_request", "more than this task has existed")


def test_a_plausible_first_text_time_is_kept(alice_client, finished_task):
    response = report_timing(alice_client, finished_task, '{"frontend_first_text_ms": 850.5}')
    assert response.status_code == 204
    finished_task.refresh_from_db()
    assert finished_task.frontend_first_text_ms == 850.5


@pytest.mark.parametrize("page", [str(10**20), "9" * 5000, "1000001", "0", "-1", "1e3", "²"])
def test_a_page_number_out_of_range_is_a_json_400(alice_client, page):
    response = alice_client.get("/api/tasks", {"page": page})
    assert_refused(response, 400, "invalid_request", "page")


def test_an_unexpected_error_in_the_api_is_answered_as_json(alice_client, monkeypatch):
    from reports import api

    def broken(tasks):
        raise RuntimeError("a bug")

    monkeypatch.setattr(api, "task_bodies", broken)
    submit(alice_client)
    client = Client(raise_request_exception=False)
    client.force_login(Task.objects.get().owner)
    assert_refused(client.get("/api/tasks"), 500, "internal_error")


def test_an_unexpected_error_in_the_event_stream_is_answered_as_json(alice, monkeypatch):
    from reports.streaming import sse

    def broken(user, task_id):
        raise RuntimeError("a bug")

    monkeypatch.setattr(sse, "owned_task", broken)
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    assert_refused(client.get(f"/api/tasks/{uuid.uuid4()}/events"), 500, "internal_error")


def test_a_post_to_the_event_stream_is_a_json_405_with_or_without_a_csrf_token(alice, alice_token):
    """The stream is read-only: a POST is told its method, never shown the CSRF page."""
    token = Client(enforce_csrf_checks=True, headers={"Authorization": f"Bearer {alice_token}"})
    session = Client(enforce_csrf_checks=True)
    session.force_login(alice)
    for client in (token, session):
        response = client.post(f"/api/tasks/{uuid.uuid4()}/events")
        assert response.status_code == 405
        assert response.json()["error"]["code"] == "method_not_allowed"
        assert response["Allow"] == "GET"


# --- private answers are not cached ---------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("get", "/api/tasks", 200),
        ("get", "/api/tasks/{id}", 200),
        ("get", "/api/tasks/{id}/result", 200),
        ("get", "/api/tasks/{missing}", 404),
        # The event stream's own answers other than the stream itself.
        ("get", "/api/tasks/{missing}/events", 404),
        ("get", "/api/tasks/{id}/events?after=x", 400),
        ("post", "/api/tasks/{id}/events", 405),
        ("get", "/api/tasks/{id}/events?after={last}", 204),
    ],
)
def test_private_api_answers_forbid_caching(alice_client, finished_task, method, path, status):
    import uuid

    url = path.format(id=finished_task.pk, missing=uuid.uuid4(), last=finished_task.last_seq)
    response = getattr(alice_client, method)(url)
    assert response.status_code == status
    directives = {d.strip() for d in response["Cache-Control"].split(",")}
    assert {"no-store", "private"} <= directives


def test_a_database_out_of_reach_is_not_cached(alice_client, monkeypatch):
    from django.db import OperationalError, connection

    def no_free_connection():
        raise OperationalError("connection pool exhausted")

    monkeypatch.setattr(connection, "ensure_connection", no_free_connection)
    response = alice_client.get("/api/tasks")
    assert response.status_code == 503
    assert {"no-store", "private"} <= {d.strip() for d in response["Cache-Control"].split(",")}
