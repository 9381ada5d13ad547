"""Citations on the task page: a click opens the cited passage over the report without
moving it (a drawer on a phone), Escape or Close gives focus back to the citation, and the
full source page shows the passage with its neighbours."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.accessibility import violations
from tests.browser.helpers import upload

pytestmark = pytest.mark.browser

# Long enough that the report scrolls on a phone.
CHAPTERS = ["Tides", "Turbines", "Harbours", "Maintenance", "Costs", "Weather"]
DOCUMENT = "# Tidal power in small harbours\n\n" + "\n\n".join(
    f"## {name}\n\n"
    + " ".join(
        f"The {name.lower()} of harbour {n} were measured over {n + 2} months by the team. "
        f"Engineers found that {name.lower()} matter for steady power in case {n}."
        for n in range(i * 3, i * 3 + 3)
    )
    for i, name in enumerate(CHAPTERS)
)


@pytest.fixture
def cited_report(tmp_path):
    """Return open(page): a succeeded task whose report cites its passages, opened."""

    def open_report(page: Page) -> str:
        path = Path(tmp_path) / "tides.md"
        path.write_text(DOCUMENT)
        task_id = upload(page, path)
        expect(page.locator("[data-task-status]")).to_have_attribute(
            "data-task-status", "succeeded", timeout=30_000
        )
        expect(page.locator("[data-report-rendered] a[data-citation]").first).to_be_visible()
        return task_id

    return open_report


def passage_json(page: Page, task_id: str, passage_id: str) -> dict:
    response = page.request.get(f"/api/tasks/{task_id}/sources/{passage_id}")
    assert response.ok, response.text()
    return response.json()


def test_a_citation_opens_its_passage_and_escape_returns_to_it(
    open_page, fast_server, cited_report
):
    page = open_page(fast_server)
    page.set_viewport_size({"width": 1280, "height": 800})
    task_id = cited_report(page)
    citation = page.locator("[data-report-rendered] a[data-citation]").nth(1)
    passage_id = citation.get_attribute("data-citation")
    passage = passage_json(page, task_id, passage_id)
    # The passage holds the sentence the citation ends.
    before = citation.evaluate(
        """a => {
            const range = document.createRange();
            range.setStart(a.parentElement, 0);
            range.setEndBefore(a);
            return range.toString();
        }"""
    )
    sentence = before.rstrip(" [").split("] ")[-1]
    assert len(sentence) > 20 and sentence in passage["text"]

    citation.click()
    dialog = page.locator("[data-citation-dialog]")
    expect(dialog).to_be_visible()
    expect(dialog.locator("[data-citation-text]")).to_have_text(passage["text"])
    expect(dialog.locator("[data-citation-title]")).to_have_text(f"Passage {passage_id}")
    expect(dialog.locator("[data-citation-place]")).to_contain_text("tides.md")
    assert violations(page) == []
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(citation).to_be_focused()

    # By keyboard: the next citation, Enter, then the close button.
    page.keyboard.press("Tab")
    following = page.locator(":focus")
    expect(following).to_have_attribute("data-citation", re.compile(r"S\d+"))
    page.keyboard.press("Enter")
    expect(dialog).to_be_visible()
    expect(dialog.locator("[data-action=close-citation]")).to_be_focused()
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(following).to_be_focused()

    # The full source page: the passage, its place, and the passages around it.
    citation.click()
    dialog.locator("[data-citation-page]").click()
    page.wait_for_url(f"**/tasks/{task_id}/sources/{passage_id}/")
    expect(page.locator("[data-source-passage]")).to_have_text(passage["text"])
    assert violations(page) == []
    page.locator("[data-passage-next]").click()
    number = int(passage_id[1:]) + 1
    page.wait_for_url(f"**/tasks/{task_id}/sources/S{number}/")
    expect(page.locator("[data-source-passage]")).to_have_text(
        passage_json(page, task_id, f"S{number}")["text"]
    )


def test_on_a_phone_the_passage_opens_as_a_drawer_and_the_page_stays_put(
    open_page, fast_server, cited_report
):
    page = open_page(fast_server)
    page.set_viewport_size({"width": 390, "height": 844})
    cited_report(page)
    citation = page.locator("[data-report-rendered] a[data-citation]").nth(6)
    # The reader scrolls down the report to it (the report opens at its title).
    citation.evaluate("e => e.scrollIntoView({block: 'end'})")
    page.evaluate("() => window.scrollBy(0, 100)")
    scrolled = page.evaluate("() => window.scrollY")
    assert scrolled > 200  # the reader is well down the report

    citation.click()
    drawer = page.locator("[data-citation-dialog]")
    expect(drawer.locator("[data-citation-place]")).to_contain_text("tides.md")
    box = drawer.bounding_box()
    assert box is not None
    assert box["x"] == 0 and box["width"] == 390  # the whole width
    assert abs(box["y"] + box["height"] - 844) <= 1  # along the bottom
    assert page.evaluate("() => window.scrollY") == scrolled
    assert violations(page) == []
    drawer.locator("[data-action=close-citation]").click()
    expect(drawer).to_be_hidden()
    expect(citation).to_be_focused()
    assert page.evaluate("() => window.scrollY") == scrolled


def test_a_cited_table_opens_as_a_table_a_reader_checks_by_column(open_page, fast_server, tmp_path):
    page = open_page(fast_server)
    path = Path(tmp_path) / "throughput.md"
    path.write_text(
        "# Harbour throughput\n\nThe harbours moved more cargo in 2026 than the year before.\n\n"
        "Table 1: Throughput by region\n\n| Region | 2025 (t) | 2026 (t) |\n| --- | ---: | ---: |\n"
        "| North | 43,994 | 48,018 |\n| West | 10,948 | 14,694 |\n\n"
        "The western harbours grew most of all, the surveyors said after the season.\n"
    )
    upload(page, path)
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=30_000
    )
    # The report's line on the table cites the passage the table was read from.
    tables = page.locator("[data-report-rendered] :is(h2, h3):text-is('Tables') + ul")
    tables.locator("a[data-citation]").first.click()
    dialog = page.locator("[data-citation-dialog]")
    table = dialog.locator("[data-citation-text] table")
    expect(table).to_be_visible()
    expect(table.locator("th")).to_have_text(["Region", "2025 (t)", "2026 (t)"])
    expect(table.locator("tbody tr").nth(1).locator("td")).to_have_text(
        ["West", "10,948", "14,694"]
    )
    expect(dialog.locator("[data-citation-text]")).not_to_contain_text("| --- |")
    expect(dialog.locator("[data-citation-place]")).to_contain_text("throughput.md")
