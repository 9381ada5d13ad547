"""The observability pages in a real browser: charts drawn, no CSP refusal, metrics served."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from prometheus_client.parser import text_string_to_metric_families

from tests.browser.helpers import task_json, upload

pytestmark = pytest.mark.browser


def test_latency_page_waterfall_and_metrics_from_a_real_task(open_page, fast_server, sample_file):
    page = open_page(fast_server)  # alice is staff in the demo users
    task_id = upload(page, sample_file)
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=30_000
    )
    reply = page.request.get(f"/api/tasks/{task_id}")
    assert reply.headers["x-request-id"] and reply.headers["x-app-version"]
    assert task_json(page, task_id)["timings"]["duration_ms"] > 0

    page.goto("/staff/latency/?window=1h")
    charts = page.locator("[data-latency-page] svg.chart")
    expect(charts).to_have_count(2)
    # The bars are drawn and coloured by the stylesheet, not left black or unstyled.
    p50 = page.locator("[data-chart=tasks] rect.bar.p50").first
    expect(p50).to_be_visible()
    assert p50.evaluate("el => getComputedStyle(el).fill") == "rgb(8, 81, 156)"
    expect(page.locator("[data-metric=Total]")).to_contain_text("small sample")

    page.goto(f"/admin/reports/task/{task_id}/change/")
    waterfall = page.locator("[data-waterfall] svg.chart")
    expect(waterfall).to_be_visible()
    expect(waterfall.locator("rect.seg.generate")).to_have_count(1)
    expect(waterfall.locator("path.marker")).to_have_count(1)

    metrics = page.request.get("/metrics")
    assert metrics.ok
    families = {f.name for f in text_string_to_metric_families(metrics.text())}
    assert {"reportline_task_duration_seconds", "reportline_queue_depth"} <= families
