"""Django admin: staff read the user's view of a task, read-only; its page stays the owner's."""

import re

import pytest
from django.contrib.auth.models import Permission

from reports import rendering
from reports.models import Status, Task
from tests.helpers import run_all

pytestmark = pytest.mark.django_db


def page_url(task: Task) -> str:
    return f"/admin/reports/task/{task.pk}/page/"


def stream_text(html: str) -> str:
    return re.search(r"<div[^>]*data-report-stream[^>]*>(.*?)</div>", html, re.S).group(1)


def assert_nothing_acts(html: str) -> None:
    for hook in ("data-action=", "data-retry", "data-socket-url", "js/task/", "data-connection"):
        assert hook not in html, hook
    assert "<form" not in html.split("<main", 1)[1]  # the site header's log-out form only


@pytest.fixture
def viewer(django_user_model):
    """A staff member allowed to view tasks, and nothing more."""
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_task"))
    return user


@pytest.fixture
def viewer_client(client, viewer):
    client.force_login(viewer)
    return client


def test_staff_see_the_owners_text_and_outcome_with_nothing_that_acts(
    viewer_client, alice_client, make_task, worker
):
    task = make_task(scenario="truncated")
    run_all(worker)
    task.refresh_from_db()
    assert task.status == Status.FAILED
    owners = alice_client.get(f"/tasks/{task.pk}/").content.decode()

    response = viewer_client.get(page_url(task))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Staff view — as alice sees it, read-only" in html
    assert 'data-task-status="failed"' in html and "stream ended early" in html
    assert stream_text(html) == stream_text(owners) != ""
    assert_nothing_acts(html)
    assert 'data-action="retry"' in owners  # the owner's own page offers what this one does not


def test_staff_see_a_succeeded_report_rendered_without_its_download(
    viewer_client, make_task, worker
):
    task = make_task(content="# Harbour levels\n\nThe tide gauge reads high on Tuesdays.\n")
    run_all(worker)
    task.refresh_from_db()
    html = viewer_client.get(page_url(task)).content.decode()
    assert 'data-task-status="succeeded"' in html
    report = re.search(r"<article[^>]*data-report-rendered[^>]*>(.*?)</article>", html, re.S)
    assert "hidden" not in report.group(0).split(">")[0]
    # as the owner sees it: under the page's own title, each heading a level down
    assert report.group(1).strip() == rendering.under_page_title(task.report_html).strip() != ""
    assert "data-download" not in html
    assert_nothing_acts(html)


def test_a_queued_task_is_shown_without_cancel_or_live_socket(viewer_client, make_task):
    task = make_task()
    html = viewer_client.get(page_url(task)).content.decode()
    assert 'data-task-status="queued"' in html
    assert_nothing_acts(html)


def test_the_change_page_links_to_the_users_view(viewer_client, make_task):
    task = make_task()
    html = viewer_client.get(f"/admin/reports/task/{task.pk}/change/").content.decode()
    tools = re.search(r'<ul class="object-tools">(.*?)</ul>', html, re.S).group(1)
    assert f'href="{page_url(task)}"' in tools and "The user's view of the task" in tools


def test_the_owner_and_other_non_staff_are_sent_to_the_admin_login(
    client, alice_client, bob_client, make_task
):
    task = make_task()
    for someone in (alice_client, bob_client, client):
        response = someone.get(page_url(task))
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")


def test_staff_without_the_view_permission_are_refused(client, django_user_model, make_task):
    task = make_task()
    staff = django_user_model.objects.create_user("nosy", password="pw", is_staff=True)
    client.force_login(staff)
    response = client.get(page_url(task))
    assert response.status_code == 403
    assert "alice" not in response.content.decode()


def test_the_task_page_itself_stays_the_owners(admin_client, viewer_client, make_task):
    task = make_task()
    assert admin_client.get(f"/tasks/{task.pk}/").status_code == 404
    assert viewer_client.get(f"/tasks/{task.pk}/").status_code == 404
    assert admin_client.get(page_url(task)).status_code == 200
