"""Reading a long report as it streams: the page follows the text while the reader is at
the bottom, stays put (offering "jump to the latest") when they scrolled up, keeps the status
and Cancel in view, and keeps their passage on screen when the rendered report replaces
the text. Then: try again from a failed page, and files refused before any upload."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import TASK_URL, upload

pytestmark = pytest.mark.browser

AT_BOTTOM = (
    "() => window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 48"
)
# The first whole sentence at the top of the reader's view, below the sticky status bar.
PASSAGE_AT_TOP = """() => {
    const bar = document.querySelector("[data-status-bar]").getBoundingClientRect();
    const stream = document.querySelector("[data-report-stream]");
    const range = document.caretRangeFromPoint(stream.getBoundingClientRect().left + 30,
                                               bar.bottom + 30);
    const text = range.startContainer.data.slice(range.startOffset);
    return text.match(/Sentence \\d+ of/)[0];
}"""


def test_following_jumping_sticky_and_the_switch_to_the_report(open_page, long_server, sample_file):
    page = open_page(long_server)
    page.set_viewport_size({"width": 1366, "height": 700})
    upload(page, sample_file)
    stream = page.locator("[data-report-stream]")
    page.wait_for_function(
        "() => document.querySelector('[data-report-stream]').textContent.length > 12000"
    )
    assert page.evaluate(AT_BOTTOM)  # followed the text down

    page.evaluate("() => window.scrollTo(0, window.scrollY - 800)")  # the reader goes up
    scrolled_to = page.evaluate("() => window.scrollY")
    jump = page.locator("[data-action=jump-latest]")
    expect(jump).to_be_visible()  # more text came below: offered, not forced
    assert abs(page.evaluate("() => window.scrollY") - scrolled_to) < 2
    bar = page.locator("[data-status-bar]").bounding_box()
    assert bar is not None and 0 <= bar["y"] <= 1  # status and Cancel stay in view
    passage = page.evaluate(PASSAGE_AT_TOP)

    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=60_000
    )
    expect(stream).to_be_hidden()
    expect(jump).to_be_hidden()
    # The passage the reader was on is on screen in the rendered report.
    block = page.locator("[data-report-rendered] p", has_text=re.compile(rf"{passage}\b")).first
    box = block.bounding_box()
    viewport = page.viewport_size
    assert box is not None and viewport is not None
    assert box["y"] + box["height"] > 0 and box["y"] < viewport["height"], (passage, box)
    expect(page.locator("a[data-download][data-format=md]")).to_be_in_viewport()


def test_a_reader_who_followed_to_the_end_gets_the_report_from_its_title(
    open_page, long_server, sample_file
):
    page = open_page(long_server)
    page.set_viewport_size({"width": 1366, "height": 700})
    upload(page, sample_file)
    page.wait_for_function(
        "() => document.querySelector('[data-report-stream]').textContent.length > 12000"
    )
    assert page.evaluate(AT_BOTTOM)  # following, never scrolled away

    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=60_000
    )
    expect(page.locator("[data-report-rendered] h2:first-child")).to_be_in_viewport()


def test_try_again_from_a_failed_page_lands_on_a_new_task(open_page, slow_server, sample_file):
    # At the slow server's pace the new task, which fails the same way, takes seconds to
    # end: its page is seen while it is on its way, not after it failed again.
    page = open_page(slow_server)
    failed = upload(page, sample_file, scenario="error", instructions="Focus on costs.")
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "failed", timeout=30_000
    )
    expect(page.locator("[data-task-title]")).to_be_focused()  # arriving: the title
    retry = page.locator("[data-action=retry]")
    expect(retry).to_be_visible()
    page.click("summary:has-text('Change the instructions')")
    page.fill("textarea[name=instructions]", "Focus on risks.")
    retry.click()
    page.wait_for_url(TASK_URL)
    new = TASK_URL.search(page.url)[1]
    assert new != failed
    expect(page.locator(".instructions")).to_contain_text("Focus on risks.")
    expect(retry).to_be_hidden()  # the new task is on its way


def test_files_the_server_would_refuse_are_refused_before_the_upload(
    open_page, fast_server, data_root
):
    page = open_page(fast_server)
    page.goto("/")
    uploads = []
    page.on("request", lambda r: uploads.append(r) if r.url.endswith("/api/tasks") else None)
    wrong = data_root / "slides.pptx"
    wrong.write_bytes(b"PK\x03\x04 not a report")
    page.set_input_files("input[name=files]", str(wrong))
    error = page.locator("[data-upload-error]")
    expect(error).to_contain_text("only .txt")
    page.click("[data-upload-submit]")
    expect(error).to_contain_text("slides.pptx")
    too_many = []
    for n in range(11):
        path = data_root / f"note-{n}.txt"
        path.write_text(f"Note {n}.")
        too_many.append(str(path))
    page.set_input_files("input[name=files]", too_many)
    expect(error).to_contain_text("at most 10 files")
    page.click("[data-upload-submit]")
    assert uploads == []


def test_the_partial_text_downloads_and_the_report_copies_and_downloads_as_pdf(
    open_page, fast_server, sample_file
):
    page = open_page(fast_server)
    upload(page, sample_file, scenario="error")
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "failed", timeout=30_000
    )
    with page.expect_download() as download:
        page.click("[data-action=download-partial]")
    assert download.value.suggested_filename == "harbours-report-partial.md"
    kept = page.locator("[data-report-stream]").evaluate("e => e.textContent")
    assert download.value.path().read_text(encoding="utf-8") == kept

    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    upload(page, sample_file)
    expect(page.locator("a[data-download][data-format=md]")).to_have_attribute(
        "download", "harbours-report.md", timeout=30_000
    )
    page.click("[data-action=copy]")
    expect(page.locator("[data-copy-outcome]")).to_have_text("Copied.")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied.startswith(page.locator("[data-report-rendered] h2:first-child").inner_text())

    # As Markdown: the saved report, sources and all, as the download has it.
    page.click("[data-action=copy-markdown]")
    expect(page.locator("[data-copy-outcome]")).to_have_text("Copied as Markdown.")
    markdown = page.evaluate("() => navigator.clipboard.readText()")
    with page.expect_download() as saved:
        page.click("a[data-download]")
    assert markdown == saved.value.path().read_text(encoding="utf-8")
    assert markdown.startswith("# ") and "\n## Sources\n" in markdown
    # Its other formats beside it, the PDF one of them.
    with page.expect_download() as as_pdf:
        page.click("a[data-download][data-format=pdf]")
    assert as_pdf.value.suggested_filename == "harbours-report.pdf"
    assert as_pdf.value.path().read_bytes().startswith(b"%PDF-")
    # Only what stops work is red.
    red = "rgb(165, 42, 42)"
    assert page.locator("[data-action=copy]").evaluate("e => getComputedStyle(e).color") != red
