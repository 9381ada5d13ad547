"""The admin's task list is readable at 1366 px and searchable by what people remember;
a task's page opens on its outcome and waterfall, with times to the second."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from reports.models import Status, Task
from tests.helpers import run_all, submit, task_of, upload

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/reports/task/"


@pytest.fixture
def harbour_task(alice_client, worker):
    task = task_of(
        submit(alice_client, upload("harbour-survey.md"), instructions="Focus on tides.")
    )
    run_all(worker)
    task.refresh_from_db()
    return task


def test_the_list_names_the_document_with_a_short_id_and_readable_durations(
    admin_client, harbour_task
):
    page = admin_client.get(CHANGELIST).content.decode()
    assert "harbour-survey.md" in page
    assert f">{str(harbour_task.pk)[:8]}<" in page
    assert f">{harbour_task.pk}<" not in page  # the full id only as a tooltip
    assert not re.search(r"<td[^>]*>\d+\.\d</td>", page)  # never a bare "3108.0"


@pytest.mark.parametrize("term", ["harbour-survey", "tides", "alice"])
def test_search_by_file_name_instructions_or_owner(admin_client, harbour_task, make_task, term):
    make_task()  # another task, of article.md, without instructions: not found by these
    found = admin_client.get(CHANGELIST, {"q": term}).context["cl"].result_list
    assert [t.pk for t in found if t.pk == harbour_task.pk] == [harbour_task.pk]
    if term != "alice":
        assert len(found) == 1


def test_a_tasks_page_opens_on_its_outcome_and_waterfall(admin_client, harbour_task):
    page = admin_client.get(f"{CHANGELIST}{harbour_task.pk}/change/").content.decode()
    assert page.index("Outcome") < page.index("waterfall") < page.index("Execution")
    created = harbour_task.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert created in page


def test_mark_failed_writes_the_same_task_ended_line_as_every_end(
    admin_client, unanswered_task, caplog, django_capture_on_commit_callbacks
):
    with caplog.at_level("INFO"), django_capture_on_commit_callbacks(execute=True):
        admin_client.post(
            CHANGELIST,
            {"action": "fail_reconciled", "_selected_action": [str(unanswered_task.pk)]},
        )
    unanswered_task.refresh_from_db()
    assert unanswered_task.status == "failed"
    ended = [r for r in caplog.records if r.getMessage() == "task.ended"]
    assert len(ended) == 1


def test_the_attention_filter_lists_tasks_no_worker_holds_and_those_in_reconciliation(
    admin_client, make_task
):
    lost, healthy, waiting, asked, queued = (make_task() for _ in range(5))
    soon = timezone.now() + timedelta(minutes=5)
    past = timezone.now() - timedelta(minutes=5)
    Task.objects.filter(pk=lost.pk).update(status=Status.RUNNING, lease_expires_at=past)
    Task.objects.filter(pk=healthy.pk).update(status=Status.RUNNING, lease_expires_at=soon)
    Task.objects.filter(pk=waiting.pk).update(status=Status.RECONCILIATION_REQUIRED)
    Task.objects.filter(pk=asked.pk).update(
        status=Status.RUNNING, lease_expires_at=soon, cancel_requested_at=past
    )

    def listed(value):
        response = admin_client.get(CHANGELIST, {"attention": value})
        assert response.status_code == 200
        return {t.pk for t in response.context["cl"].result_list}

    assert listed("lease_expired") == {lost.pk}
    assert listed("reconciliation") == {waiting.pk}
    assert listed("cancel_unheeded") == {asked.pk}
    assert queued.pk not in listed("lease_expired")


def test_an_owner_in_the_list_links_to_their_tasks_and_no_one_elses(
    admin_client, make_task, django_user_model
):
    ann = django_user_model.objects.create_user("ann", password="pw")
    joanna = django_user_model.objects.create_user("joanna", password="pw")
    own = make_task(owner=ann)
    make_task(owner=joanna)
    page = admin_client.get(CHANGELIST).content.decode()
    link = re.search(r'<a href="([^"]+)" title="Every task of ann">ann</a>', page).group(1)
    tasks = admin_client.get(CHANGELIST + link.replace("&amp;", "&"))
    assert tasks.status_code == 200
    assert [t.pk for t in tasks.context["cl"].result_list] == [own.pk]
