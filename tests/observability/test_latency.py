"""The staff latency page: figures over a window, timeouts counted, small samples flagged."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reports.observability import latency
from tests.observability.plans import planned_task
from tests.timings import ended_task

pytestmark = pytest.mark.django_db


def summary(figures, key):
    return {k: s for k, _, _, s in figures.task_metrics + figures.stage_metrics}[key]


def test_percentiles_count_timeouts_at_their_end(alice):
    for total in (1.0, 2.0, 3.0):
        ended_task(alice, queue_s=0.1, first_text_s=0.5, total_s=total, frontend_first_text_ms=700)
    # Timed out before any text: counted at 60 s for first text (a lower bound), and at
    # 60 s for the total; never dropped.
    ended_task(
        alice, status="failed", error_type="timeout", queue_s=0.1, first_text_s=None, total_s=60
    )
    figures = latency.figures("all")
    first_text = summary(figures, "first_text")
    assert first_text.count == 4 and first_text.censored == 1
    assert first_text[50].ms == 500 and not first_text[50].at_least
    assert first_text[99].ms == 60_000 and first_text[99].at_least
    total = summary(figures, "total")
    assert (total.count, total[50].ms, total[99].ms) == (4, 2000, 60_000)
    assert not total[99].at_least  # the total of a timed-out task is exact: up to the timeout
    browser = summary(figures, "frontend_first_text")
    assert browser.count == 4 and browser[50].ms == 700 and browser[99].at_least
    assert summary(figures, "queue")[50].ms == 100
    generate = summary(figures, "generate")
    assert generate.count == 4 and generate.censored == 1  # cut short by the timeout
    assert all(s.small for *_, s in figures.task_metrics)  # 4 < 20


def test_rates_have_their_denominators(alice):
    ended_task(alice)
    ended_task(alice)
    ended_task(alice, status="failed", error_type="provider_error")
    ended_task(alice, status="failed", error_type="stalled", first_text_s=None, total_s=31)
    ended_task(alice, status="cancelled", queue_s=None, first_text_s=None, total_s=1)
    ended_task(alice, status="queued", queue_s=None, first_text_s=None, total_s=None)
    figures = latency.figures("all")
    assert (figures.tasks, figures.ended) == (6, 5)
    rates = {rate.label: (rate.count, rate.of, rate.percent) for rate in figures.rates}
    assert rates["failed"] == (2, 5, 40.0)
    assert rates["of which timed out"] == (1, 5, 20.0)
    assert rates["cancelled"] == (1, 5, 20.0)


def test_the_window_selects_tasks_by_their_creation(alice):
    ended_task(alice, age=timedelta(minutes=10))
    ended_task(alice, age=timedelta(hours=5))
    ended_task(alice, age=timedelta(days=3))
    ended_task(alice, age=timedelta(days=30))
    counts = {w: latency.figures(w).tasks for w in latency.WINDOWS}
    assert counts == {"1h": 1, "24h": 2, "7d": 3, "all": 4}


def test_small_sample_threshold_is_a_setting(alice, settings):
    settings.REPORTS_LATENCY_SMALL_SAMPLE = 2
    ended_task(alice)
    ended_task(alice)
    assert not summary(latency.figures("all"), "total").small
    settings.REPORTS_LATENCY_SMALL_SAMPLE = 3
    assert summary(latency.figures("all"), "total").small


def test_the_page_shows_figures_counts_flags_and_charts(admin_client, alice):
    ended_task(alice, total_s=2.0)
    ended_task(alice, status="failed", error_type="timeout", first_text_s=None, total_s=90)
    page = admin_client.get("/staff/latency/?window=1h")
    assert page.status_code == 200
    html = page.content.decode()
    assert "data-latency-page" in html
    assert html.count('<svg class="chart"') == 2 and 'class="bar p99' in html
    assert "data-small-sample" in html and "fewer than 20 samples" in html
    assert "<td>≥ 90 s</td>" in html  # the timed-out task's first text, a lower bound
    assert "<td>1</td><td>2</td><td>50.0 %</td>" in html  # 1 failed out of 2 ended
    assert '<option value="1h" selected>' in html
    assert "style=" not in html.split("data-latency-page", 1)[1]  # the CSP refuses it
    assert "<script>" not in html


def test_an_unknown_window_falls_back_to_the_default(admin_client):
    page = admin_client.get("/staff/latency/?window=forever")
    assert page.status_code == 200
    assert f'<option value="{latency.DEFAULT_WINDOW}" selected>' in page.content.decode()


def test_the_page_is_for_staff_only(client, alice_client, alice_token):
    for caller, headers in ((client, {}), (alice_client, {})):
        response = caller.get("/staff/latency/", headers=headers)
        assert response.status_code == 302
        assert "/admin/login/" in response["Location"]
    by_token = client.get("/staff/latency/", headers={"Authorization": f"Bearer {alice_token}"})
    assert by_token.status_code == 302


def test_the_admin_index_links_to_it(admin_client):
    html = admin_client.get("/admin/").content.decode()
    assert 'href="/staff/latency/"' in html
    assert 'href="/admin/reports/task/compare/"' in html


def test_one_call_and_planned_tasks_are_measured_apart(admin_client, alice):
    quick = ended_task(alice, total_s=2.0)
    for total in (30.0, 40.0):
        planned = ended_task(alice, total_s=total)
        planned.plan = {"parts": 4, "rounds": 0, "calls": 5}
        planned.save(update_fields=["plan"])
    quick.plan = {"parts": 0, "rounds": 0, "calls": 1}
    quick.save(update_fields=["plan"])
    ended_task(alice, total_s=3.0)  # no plan recorded: one call
    totals = {calls: summary(latency.figures("all", calls), "total") for calls in latency.CALLS}
    assert {calls: t.count for calls, t in totals.items()} == {"all": 4, "one": 2, "planned": 2}
    assert totals["one"][99].ms == 3000 and totals["planned"][50].ms == 30_000
    html = admin_client.get("/staff/latency/?window=all&calls=planned").content.decode()
    assert '<option value="planned" selected>' in html
    assert "2 tasks created (2 planned)" in html and "n=2" in html
    every = admin_client.get("/staff/latency/?window=all&calls=bogus").content.decode()
    assert "4 tasks created (2 planned)" in every


def test_the_calls_of_plans_have_their_own_rows(admin_client, make_task):
    assert "part call" not in admin_client.get("/staff/latency/?window=all").content.decode()
    planned_task(make_task(), parts=3, reused=1)
    figures = latency.figures("all", "planned")
    assert summary(figures, "part_call").count == 3
    assert summary(figures, "part_call")[50].ms == 2000
    assert summary(figures, "round_call").count == 1
    one_call = latency.figures("all", "one")
    assert "part_call" not in {key for key, *_ in one_call.stage_metrics}
    html = admin_client.get("/staff/latency/?window=all&calls=planned").content.decode()
    assert "part call" in html and "per ended call of a plan" in html
