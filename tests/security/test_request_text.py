"""Text a client sends that the database cannot hold, and pages no cache may keep.

A NUL character is invalid input: PostgreSQL refuses it in any text, so before this was
checked a NUL in a login name answered 503 and a NUL in an admin filter 500. Run these on
PostgreSQL too (`DATABASE_URL`): on SQLite a NUL reaches the database harmlessly.
"""

from __future__ import annotations

import pytest
from django.test import Client

from tests.helpers import assert_refused

pytestmark = pytest.mark.django_db


@pytest.fixture
def quiet_client() -> Client:
    """A client that gets the server's answer to an error, as a browser would."""
    return Client(raise_request_exception=False)


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_a_nul_in_the_login_name_is_a_400(quiet_client, alice, logged, path):
    response = quiet_client.post(
        path,
        "username=al%00ice&password=alice-pass",
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 400
    assert b'data-error-page="400"' in response.content
    assert "_auth_user_id" not in quiet_client.session
    assert '"levelname": "ERROR"' not in logged.getvalue()


def test_a_nul_in_the_session_cookie_is_a_400_for_anyone(logged):
    client = Client(raise_request_exception=False, HTTP_COOKIE='sessionid="aaaaaaaa\\000bb"')
    response = client.get("/")
    assert response.status_code == 400
    assert '"levelname": "ERROR"' not in logged.getvalue()


@pytest.mark.parametrize("selected", ["abc", "1.5", "00000000-0000-0000-0000-00000000000g"])
def test_a_selected_id_that_is_no_id_is_a_400_in_every_admin_action(
    quiet_client, admin_user, alice, selected
):
    quiet_client.force_login(admin_user)
    for changelist, action in [
        ("/admin/reports/budget/", "start_new_period"),
        ("/admin/reports/task/", "cancel_tasks"),
        ("/admin/reports/apitoken/", "delete_selected"),
    ]:
        response = quiet_client.post(
            changelist, {"action": action, "_selected_action": [selected], "index": 0}
        )
        assert response.status_code == 400, (changelist, response.status_code)


def test_a_nul_in_a_selected_id_of_an_admin_action_is_a_400(quiet_client, admin_user, alice):
    quiet_client.force_login(admin_user)
    for changelist, action in [
        ("/admin/reports/budget/", "start_new_period"),
        ("/admin/reports/task/", "cancel_tasks"),
    ]:
        response = quiet_client.post(
            changelist, {"action": action, "_selected_action": ["1\x00"], "index": 0}
        )
        assert response.status_code == 400


@pytest.mark.parametrize(
    "query",
    [
        "error_type=%00",
        "status=%00",
        "q=%00",
        "q=al%00ice",
        "o=1%00",
        "created_at__year=%00",
        "%00=1",
    ],
)
def test_a_nul_in_an_admin_query_is_a_400(quiet_client, admin_user, query):
    quiet_client.force_login(admin_user)
    response = quiet_client.get(f"/admin/reports/task/?{query}")
    assert response.status_code == 400
    assert b'data-error-page="400"' in response.content


@pytest.mark.parametrize("path", ["/api/tasks?status=%00", "/api/tasks?page=1%00"])
def test_a_nul_in_an_api_query_is_a_json_400(alice_client, path):
    assert_refused(alice_client.get(path), 400, "invalid_request", "NUL")


def test_a_nul_in_a_page_query_is_a_400(alice_client, make_task):
    task = make_task()
    response = alice_client.get(f"/tasks/{task.pk}/?reused=%00")
    assert response.status_code == 400
    assert b'data-error-page="400"' in response.content


# --- caching of pages ---------------------------------------------------------------------


@pytest.fixture
def staff_client(admin_user) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def assert_private(response) -> None:
    directives = {d.strip() for d in response["Cache-Control"].split(",")}
    assert {"no-store", "private"} <= directives, response["Cache-Control"]


def test_the_home_page_with_file_names_and_budget_is_not_cached(alice_client, make_task):
    make_task()
    response = alice_client.get("/")
    assert response.status_code == 200 and b"doc.md" in response.content
    assert_private(response)
    assert_private(alice_client.get("/", headers={"HX-Request": "true"}))


def test_the_task_and_source_pages_are_not_cached(alice_client, make_task):
    task = make_task()
    assert_private(alice_client.get(f"/tasks/{task.pk}/"))
    assert_private(alice_client.get(f"/tasks/{task.pk}/sources/S1/"))  # a 404 page too


def test_staff_pages_and_metrics_are_not_cached(staff_client):
    for path in ("/staff/latency/", "/metrics", "/admin/", "/admin/reports/task/"):
        response = staff_client.get(path)
        assert response.status_code == 200, path
        assert_private(response)


def test_the_login_page_and_a_refusal_are_not_cached(client, quiet_client):
    assert_private(client.get("/accounts/login/"))
    assert_private(client.get("/"))  # the redirect to the login
    assert_private(quiet_client.get("/admin/reports/task/?q=%00"))
