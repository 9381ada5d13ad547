"""A planned task's waterfall draws its calls on the task's time axis: the parts side by
side where they overlapped, then the round, then the final call."""

import pytest

from reports.observability.waterfall import task_waterfall
from tests.helpers import run_all
from tests.observability.plans import planned_task

pytestmark = pytest.mark.django_db


def spans(waterfall) -> dict[str, tuple[str, float, float]]:
    return {
        row.label: (row.segments[0].kind, row.segments[0].start_ms, row.segments[0].end_ms)
        for row in waterfall.rows
    }


def test_the_calls_of_a_plan_are_rows_after_the_attempts(make_task):
    waterfall = task_waterfall(planned_task(make_task(), parts=3, reused=1))
    labels = [row.label for row in waterfall.rows]
    assert labels == [
        "attempt 1 · rate_limited",
        "attempt 2 · succeeded",
        "part-1 · attempt 1",
        "part-2 · attempt 2",
        "part-3 · attempt 2",
        "round-1-1 · attempt 2",
        "final · attempt 2",
    ]
    drawn = spans(waterfall)
    # Parts 2 and 3 ran side by side; part 1 was written by the first attempt.
    assert drawn["part-1 · attempt 1"][1:] == (250, 450)
    _, start_2, end_2 = drawn["part-2 · attempt 2"]
    _, start_3, end_3 = drawn["part-3 · attempt 2"]
    assert start_3 < end_2 and start_2 < end_3
    _, round_start, round_end = drawn["round-1-1 · attempt 2"]
    assert round_start >= max(end_2, end_3)
    kind, final_start, final_end = drawn["final · attempt 2"]
    assert kind == "final" and final_start == round_end
    assert final_end == 800 + 20 + 5 + 5000  # the end of the last attempt's generate stage
    assert waterfall.axis_ms >= final_end


def test_the_chart_labels_every_call(make_task):
    chart = task_waterfall(planned_task(make_task(), parts=2)).chart()
    for label in ("part-1 · attempt 1", "part-2 · attempt 2", "round-1-1", "final · attempt 2"):
        assert label in chart
    assert 'class="seg part"' in chart and 'class="seg final"' in chart


def test_a_one_call_task_has_no_plan_rows(make_task, worker):
    task = make_task()
    run_all(worker)
    task.refresh_from_db()
    assert [row.label for row in task_waterfall(task).rows] == ["attempt 1 · succeeded"]
