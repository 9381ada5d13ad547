"""A file's name as the user gave it, through a real browser's upload and download."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import TASK_URL, ask_for_a_fresh_report
from tests.helpers import SAMPLE

pytestmark = pytest.mark.browser

# Chromium sends the quote as %22 and the backslash as it is.
NAME = 'Résumé — Q3 «final» (copy) #2 & "<b>x<\\b>" 🚀.md'


def test_a_file_name_is_shown_and_downloaded_as_the_user_gave_it(open_page, fast_server):
    page = open_page(fast_server)
    page.goto("/")
    ask_for_a_fresh_report(page)
    page.set_input_files(
        "input[name=files]",
        files=[{"name": NAME, "mimeType": "text/markdown", "buffer": SAMPLE.encode()}],
    )
    page.click("[data-upload-submit]")
    page.wait_for_url(TASK_URL)
    expect(page.locator("[data-task-title]")).to_have_text(NAME)

    download_link = page.locator("a[data-download][data-format=md]")
    expect(download_link).to_be_visible(timeout=30_000)
    with page.expect_download() as download:
        download_link.click()
    # The real name, as far as the system allows one in a file name (Chromium replaces
    # the characters no file name may hold).
    saved = download.value.suggested_filename
    assert saved.startswith("Résumé — Q3 «final» (copy) #2 & "), saved
    assert saved.endswith(" 🚀-report.md"), saved

    page.goto("/")
    expect(page.locator(".task-list")).to_contain_text(NAME)
