"""Per task in admin: the waterfall of every attempt, and three tasks side by side."""

from __future__ import annotations

import re

import pytest

from reports.models import Task
from reports.observability.waterfall import default_trio
from tests.timings import RETRIED, ended_task

pytestmark = pytest.mark.django_db


def rows_of(svg: str) -> list[str]:
    return re.findall(r'class="row-label"[^>]*>([^<]+)<', svg)


def test_the_waterfall_shows_each_attempt_of_a_retried_task(admin_client, alice):
    task = ended_task(alice, queue_s=0.1, first_text_s=2.7, total_s=3.2, attempts=RETRIED)
    html = admin_client.get(f"/admin/reports/task/{task.pk}/change/").content.decode()
    waterfall = html.split("data-waterfall", 1)[1].split("</svg>", 1)[0]
    assert rows_of(waterfall) == [
        "attempt 1 · rate_limited",
        "attempt 2 · succeeded",
    ]
    for kind in ("queue", "parse", "prepare", "generate", "validate", "render", "save"):
        assert f'class="seg {kind}"' in waterfall
    assert "wait before retry: 2 s" in waterfall  # attempt 1 ended at 0.3 s, 2 began at 2.3 s
    assert "first text 400 ms after the attempt began" in waterfall
    assert 'class="marker"' in waterfall
    assert "style=" not in waterfall


def test_the_waterfall_of_a_task_still_queued(admin_client, alice):
    task = ended_task(alice, status="queued", queue_s=None, first_text_s=None, total_s=None)
    response = admin_client.get(f"/admin/reports/task/{task.pk}/change/")
    assert response.status_code == 200
    assert rows_of(response.content.decode().split("data-waterfall", 1)[1])[:1] == ["queue"]


def trio(alice):
    normal = ended_task(alice, queue_s=0.1, first_text_s=0.5, total_s=2.0)
    slow = ended_task(alice, queue_s=0.1, first_text_s=3.5, total_s=30.0)
    failed = ended_task(
        alice, status="failed", error_type="provider_error", queue_s=0.1, total_s=1.0
    )
    return normal, slow, failed


def test_side_by_side_highlights_the_stage_that_differs(admin_client, alice):
    normal, slow, failed = trio(alice)
    query = f"task={normal.pk}&task={slow.pk}&task={failed.pk}"
    html = admin_client.get(f"/admin/reports/task/compare/?{query}").content.decode()
    assert html.count("data-compare-task=") == 3
    assert html.count('<svg class="chart"') == 3
    # One shared axis: every chart ends at the slow task's 30 s.
    assert len(set(re.findall(r'viewBox="[^"]+"', html))) <= 3
    rows = dict(re.findall(r'<th scope="row">([^<]+)</th>(.*?)</tr>', html))
    assert "data-stands-out" in rows["generate"] and "data-stands-out" in rows["total"]
    assert "data-stands-out" not in rows["parse"]
    assert "data-stands-out" not in rows["queue"]


def test_the_default_pick_is_median_slowest_and_latest_failed(admin_client, alice):
    normal, slow, failed = trio(alice)
    ended_task(alice, total_s=1.5)
    ended_task(alice, total_s=2.5)
    assert [t.pk for t in default_trio()] == [normal.pk, slow.pk, failed.pk]
    html = admin_client.get("/admin/reports/task/compare/").content.decode()
    assert [m for m in re.findall(r'data-compare-task="([^"]+)"', html)] == [
        str(normal.pk),
        str(slow.pk),
        str(failed.pk),
    ]


def test_a_bad_id_is_said_plainly(admin_client, alice):
    normal, _, _ = trio(alice)
    html = admin_client.get(f"/admin/reports/task/compare/?task={normal.pk}&task=nope").content
    assert b"No task with id &#x27;nope&#x27;." in html
    assert html.count(b"data-compare-task=") == 1


def test_the_admin_action_opens_the_comparison(admin_client, alice):
    normal, slow, failed = chosen = trio(alice)
    response = admin_client.post(
        "/admin/reports/task/",
        {
            "action": "compare_tasks",
            "_selected_action": [str(t.pk) for t in (failed, slow, normal)],
        },
    )
    assert response.status_code == 302
    # In the order the roles want, whatever the order of the selection.
    assert response["Location"] == (
        f"/admin/reports/task/compare/?task={normal.pk}&task={slow.pk}&task={failed.pk}"
    )
    too_few = admin_client.post(
        "/admin/reports/task/",
        {"action": "compare_tasks", "_selected_action": [str(chosen[0].pk)]},
        follow=True,
    )
    assert b"Select exactly three tasks" in too_few.content


def test_comparison_is_for_staff_only(alice_client, alice):
    trio(alice)
    response = alice_client.get("/admin/reports/task/compare/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert Task.objects.count() == 3
