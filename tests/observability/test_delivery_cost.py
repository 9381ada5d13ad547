"""What a delivered report costs, per model: the spend of every attempt over the successes."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reports.models import Task
from reports.observability import latency
from tests.timings import ended_task

pytestmark = pytest.mark.django_db

CENTS_2 = 20_000  # micro-dollars


def _attempt(status: str, cost: int | None, error_type: str = "") -> dict:
    return {
        "status": status,
        "error_type": error_type,
        "start_s": 0.2,
        "end_s": 1.0,
        "cost_micros": cost,
    }


def _task(owner, model: str, status: str, attempts: list[dict], age=timedelta(minutes=5)):
    error_type = "" if status == "succeeded" else "provider_error"
    task = ended_task(owner, status=status, error_type=error_type, attempts=attempts, age=age)
    Task.objects.filter(pk=task.pk).update(model=model)
    return task


def _cheap_model_that_fails(owner, age=timedelta(minutes=5)) -> None:
    # Three attempts at 2 cents: a retried failure, then a success; and a task that failed.
    failed = _attempt("retry_scheduled", CENTS_2, "provider_error")
    _task(owner, "cheap", "succeeded", [failed, _attempt("succeeded", CENTS_2)], age)
    _task(owner, "cheap", "failed", [_attempt("failed", CENTS_2, "provider_error")], age)


def test_a_delivered_report_costs_every_attempt_spent_on_the_way(alice):
    _cheap_model_that_fails(alice)
    _task(alice, "dear", "succeeded", [_attempt("succeeded", 2 * CENTS_2)])

    costs = {cost.model: cost for cost in latency.figures("24h").model_costs}

    cheap, dear = costs["cheap"], costs["dear"]
    assert (cheap.attempts, cheap.delivered) == (3, 1)
    assert (cheap.per_attempt, cheap.per_delivered) == (CENTS_2, 3 * CENTS_2)
    assert (dear.per_attempt, dear.per_delivered) == (2 * CENTS_2, 2 * CENTS_2)
    # The cheaper model per attempt is the dearer one per delivered report.
    assert cheap.dearer_than == ("dear",) and dear.dearer_than == ()


def test_the_page_shows_both_costs_and_a_dash_where_nothing_was_delivered(admin_client, alice):
    _cheap_model_that_fails(alice)
    _task(alice, "dear", "succeeded", [_attempt("succeeded", 2 * CENTS_2)])
    _task(alice, "broken", "failed", [_attempt("failed", CENTS_2, "provider_error")])
    lost = _attempt("interrupted", None, "worker_lost")  # its cost is unknown
    _task(alice, "lost", "succeeded", [lost, _attempt("succeeded", CENTS_2)])

    html = admin_client.get("/staff/latency/").content.decode()

    table = html.split("data-delivery-costs", 1)[1].split("</table>", 1)[0]
    cheap = table.split('data-model="cheap"', 1)[1].split("</tr>", 1)[0]
    assert "<td>$0.0200</td>" in cheap  # per attempt
    assert "$0.0600 <strong" in cheap and "costs more per delivered report than dear" in cheap
    broken = table.split('data-model="broken"', 1)[1].split("</tr>", 1)[0]
    assert '— <span class="note">no report delivered</span>' in broken
    lost = table.split('data-model="lost"', 1)[1].split("</tr>", 1)[0]
    assert "(1 of unknown cost, left out)" in lost and "<td data-per-delivered>≥ $0.0200" in lost


def test_only_the_attempts_of_tasks_created_in_the_window_count(alice):
    _task(alice, "cheap", "succeeded", [_attempt("succeeded", CENTS_2)])
    _cheap_model_that_fails(alice, age=timedelta(days=3))

    def cheap(window):
        return next(c for c in latency.figures(window).model_costs if c.model == "cheap")

    assert (cheap("24h").attempts, cheap("24h").per_delivered) == (1, CENTS_2)
    assert (cheap("7d").attempts, cheap("7d").per_delivered) == (4, 2 * CENTS_2)
