"""The admin's task list at 1366 by 768 px, in a real browser: every column whole on screen,
with a long file name and a failure in it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import upload

pytestmark = pytest.mark.browser

# No space or hyphen to break at.
LONG_NAME = "shared_mime_info_spec_freedesktop_org_edition_2024_final_reviewed.md"


def test_the_task_list_fits_1366_px(open_page, fast_server, sample_file, data_root):
    page = open_page(fast_server)  # alice is staff in the demo users
    page.set_viewport_size({"width": 1366, "height": 768})
    long_named = data_root / LONG_NAME
    long_named.write_text(sample_file.read_text())
    upload(page, long_named, scenario="error")
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "failed", timeout=30_000
    )

    page.goto("/admin/reports/task/")
    expect(page.locator("#result_list")).to_contain_text(LONG_NAME)
    # Every column whole on screen: the list does not scroll sideways inside its box.
    results = page.locator("#changelist .results")
    right = results.bounding_box()["x"] + results.bounding_box()["width"]
    for header in page.locator("#result_list thead th").all():
        box = header.bounding_box()
        assert box["x"] + box["width"] <= min(right, 1366) + 1, (header.inner_text(), box)
    assert results.evaluate("e => e.scrollWidth <= e.clientWidth")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
