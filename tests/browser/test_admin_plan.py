"""A planned task in the admin, in a real browser at 1366 px: the list marks it and still
shows its first text and duration; its page draws the plan's calls and lists them."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import upload

pytestmark = pytest.mark.browser

# Three parts side by side from 0.1 s after the attempt began, then nothing else: the rows
# a worker writes, written here so the test does not depend on how a plan is run.
MAKE_PLAN = """
from datetime import timedelta
from reports.models import PlanCall, Task
task = Task.objects.get(pk="{task_id}")
attempt = task.attempts.get()
PlanCall.objects.bulk_create(
    PlanCall(task=task, key=f"part-{{i}}", kind="part", position=i, first_passage=i,
             last_passage=i, label=f"Chapter {{i}}", status="succeeded", attempt_number=1,
             started_at=attempt.started_at + timedelta(milliseconds=100),
             ended_at=attempt.started_at + timedelta(milliseconds=200 + 10 * i),
             duration_ms=100 + 10 * i, input_tokens=1000, output_tokens=100)
    for i in (1, 2, 3)
)
Task.objects.filter(pk=task.pk).update(plan={{"parts": 3, "rounds": 0, "calls": 4}})
"""


def test_a_planned_task_in_the_admin_list_and_page(open_page, fast_server, sample_file):
    page = open_page(fast_server)  # alice is staff in the demo users
    page.set_viewport_size({"width": 1366, "height": 800})
    task_id = upload(page, sample_file)
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=30_000
    )
    fast_server.manage("shell", "-c", MAKE_PLAN.format(task_id=task_id))

    page.goto("/admin/reports/task/")
    expect(page.locator("[data-planned]")).to_have_text("3 parts")
    for column in ("first_text_ms", "duration_ms"):
        header = page.locator(f"#result_list th.column-{column}")
        expect(header).to_be_visible()
        box = header.bounding_box()
        assert box["x"] + box["width"] <= 1366, (column, box)  # not cut off the screen

    page.goto(f"/admin/reports/task/{task_id}/change/")
    expect(page.locator("[data-plan-summary]")).to_contain_text("3 parts")
    expect(page.locator("[data-plan-call]")).to_have_count(4)  # three parts and the final
    waterfall = page.locator("[data-waterfall] svg.chart")
    expect(waterfall.locator("rect.seg.part")).to_have_count(3)
    part = waterfall.locator("rect.seg.part").first
    assert part.evaluate("el => getComputedStyle(el).fill") == "rgb(116, 196, 118)"
