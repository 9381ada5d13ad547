"""A planned task's admin page shows its passages and its calls in order, which of them a
later attempt reused, and the final call; the list marks planned tasks."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.helpers import run_all
from tests.observability.plans import planned_task

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/reports/task/"


def plan_rows(page: str) -> list[list[str]]:
    table = re.search(r"<table[^>]*data-plan-calls.*?</table>", page, re.S).group(0)
    rows = re.findall(r"<tr data-plan-call>(.*?)</tr>", table, re.S)
    return [re.findall(r"<td>(.*?)</td>", row, re.S) for row in rows]


def test_the_task_page_lists_the_calls_in_order_with_the_reused_ones(admin_client, make_task):
    task = planned_task(make_task(), parts=3, reused=1)
    page = admin_client.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    assert "6 passages, 3 parts, 1 round" in page
    rows = plan_rows(page)
    assert [row[0] for row in rows] == ["part-1", "part-2", "part-3", "round-1-1", "final"]
    part_1, part_2 = rows[0], rows[1]
    assert part_1[3] == "S1 to S2" and part_1[5] == "attempt 1" and part_1[6] == "reused"
    assert part_2[5] == "attempt 2" and part_2[6] == "-"
    assert part_2[8] == "2 s" and part_2[10] == "3002 / 402"
    assert rows[-1][5] == "attempt 2" and rows[-1][8] == "5 s"  # its generate stage


def test_the_plan_costs_the_same_few_queries_whatever_its_size(admin_client, make_task):
    def queries(task) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(f"{CHANGELIST}{task.pk}/change/").status_code == 200
        return len(captured)

    small = planned_task(make_task(), parts=2)
    queries(small)  # fills the per-process caches (the admin's content types) first
    assert queries(small) == queries(planned_task(make_task(), parts=20, reused=7))


def test_a_one_call_task_says_so(admin_client, make_task, worker):
    task = make_task()
    run_all(worker)
    page = admin_client.get(f"{CHANGELIST}{task.pk}/change/").content.decode()
    assert "data-plan-calls" not in page


def test_the_list_marks_planned_tasks_under_their_document(admin_client, make_task):
    planned_task(make_task(), parts=12)
    make_task()
    page = admin_client.get(CHANGELIST).content.decode()
    assert page.count("data-planned") == 1
    assert re.search(r"data-planned>12 parts, 1 round<", page)


def test_marking_planned_tasks_costs_the_list_no_query(admin_client, make_task):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(CHANGELIST).status_code == 200
        return len(captured)

    planned_task(make_task(), parts=2)
    few = queries()
    for parts in (3, 4, 5):
        planned_task(make_task(), parts=parts)
    assert queries() == few
