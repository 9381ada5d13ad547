"""A document several times the model's window, read in parts, in a real browser: the page
says what the plan does while it runs, and when it is cancelled part-way it says how far it
came and shows (and downloads) the notes it wrote, the only text that arrived."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import serve, upload
from tests.browser.server import LiveServer

pytestmark = pytest.mark.browser

MANUAL = Path(__file__).parents[1] / "fixtures" / "corpus" / "bzip2-manual.pdf"


@pytest.fixture(scope="module")
def plan_server(data_root, database_template) -> Iterator[LiveServer]:
    """A window of 12,000 tokens, 4,000 of them for the output: the bzip2 manual's 75,000
    characters are read in three parts, each call's notes taking some seconds."""
    yield from serve(
        data_root,
        database_template,
        "plan",
        REPORTS_CONTEXT_TOKENS=12_000,
        REPORTS_MAX_OUTPUT_TOKENS=4_000,
        REPORTS_SIMULATED_TTFT_S=0.5,
        REPORTS_SIMULATED_TOKENS_PER_S=25,
        REPORTS_POLL_S=0.2,
    )


def test_a_plan_cancelled_part_way_says_how_far_it_came_and_keeps_its_notes(open_page, plan_server):
    page = open_page(plan_server)
    upload(page, MANUAL)
    notice = page.locator("[data-plan-notice]")
    # Opened before the plan was made, the page learns of it as the parts are read.
    expect(notice).to_contain_text("Read in 3 parts", timeout=30_000)
    expect(notice).to_contain_text("so it writes notes on each part")
    expect(notice).to_contain_text("Every passage is read.")
    expect(page.locator("[data-plan-notes]")).to_be_hidden()

    expect(page.locator("[data-progress][data-done='1']")).to_be_visible(timeout=60_000)
    page.click("[data-action=cancel]")
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "cancelled", timeout=30_000
    )
    expect(notice).to_contain_text("Planned in 3 parts")
    expect(notice).not_to_contain_text("Every passage")
    notes = page.locator("[data-plan-notes-text]")
    expect(notes).to_contain_text("Notes on the parts read so far")
    read = len(re.findall(r"^## ", notes.text_content(), re.M))
    assert 1 <= read < 3
    expect(notice).to_contain_text(f"It stopped with notes on {read} of the 3 parts")
    expect(page.locator("[data-incomplete]")).to_contain_text("below are the notes")
    assert re.search(r"\[S\d+\]", notes.text_content())

    with page.expect_download() as download:
        page.click("[data-action=download-partial]")
    assert download.value.path().read_text(encoding="utf-8") == notes.text_content()

    page.reload()  # the same, from the server
    expect(notice).to_contain_text(f"It stopped with notes on {read} of the 3 parts")
    expect(notes).to_have_text(re.compile(r"^Notes on the parts read so far"))
