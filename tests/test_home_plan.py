"""The home page's task list says which reports were read in a plan of calls."""

import re

import pytest

pytestmark = pytest.mark.django_db


def test_a_planned_task_is_marked_with_its_parts(alice_client, make_task):
    planned, single = make_task(), make_task()
    planned.plan = {"parts": 12, "rounds": 1, "calls": 14}
    planned.save(update_fields=["plan"])
    single.plan = {"parts": 0, "rounds": 0, "calls": 1}
    single.save(update_fields=["plan"])
    page = alice_client.get("/").content.decode()
    assert re.findall(r"<span data-plan>(.*?)</span>", page) == ["read in 12 parts"]


def test_a_planned_task_that_ended_unread_is_marked_as_planned_not_read(alice_client, make_task):
    task = make_task()
    task.plan = {"parts": 12, "rounds": 1, "calls": 14}
    task.status = "cancelled"
    task.save(update_fields=["plan", "status"])
    page = alice_client.get("/").content.decode()
    assert re.findall(r"<span data-plan>(.*?)</span>", page) == ["planned in 12 parts"]


def test_a_planned_tasks_page_says_so_above_the_report(alice_client, make_task):
    task = make_task()
    task.plan = {"parts": 12, "rounds": 1, "calls": 14}
    task.save(update_fields=["plan"])
    page = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    notice = re.search(r"<p id=\"task-plan\"[^>]*>(.*?)</p>", page, re.S)
    assert notice and notice.group(1).startswith("Read in 12 parts")
    assert "hidden" not in notice.group(0)
    assert page.index('id="task-plan"') < page.index("data-report-stream")
    assert page.index('id="task-plan"') < page.index('id="task-report"')


def test_the_upload_form_carries_what_a_plan_is_estimated_from(alice_client, settings):
    settings.REPORTS_CONTEXT_TOKENS, settings.REPORTS_MAX_PARTS = 20_000, 30
    page = alice_client.get("/").content.decode()
    form = re.search(r"<form data-upload[^>]*>", page, re.S).group(0)
    found = dict(re.findall(r'data-(call-chars|part-chars|max-calls)="(\d+)"', form))
    assert int(found["call-chars"]) < 20_000 * 3 and int(found["part-chars"]) > 0
    assert found["max-calls"] == "30"
    assert "data-plan-estimate" in page


def test_a_document_read_as_notes_first_in_one_part_is_not_said_to_be_in_parts(
    alice_client, make_task
):
    # The documents fit one call of notes, but not one with room for the report: one part.
    task = make_task()
    task.plan = {"parts": 1, "rounds": 0, "calls": 2}
    task.save(update_fields=["plan"])
    page = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    notice = re.search(r"<p id=\"task-plan\"[^>]*>(.*?)</p>", page, re.S).group(1)
    assert notice.startswith("Read in two steps: ")
    assert "1 part" not in notice and "each part" not in notice
    home = alice_client.get("/").content.decode()
    assert re.findall(r"<span data-plan>(.*?)</span>", home) == ["read in two steps"]
