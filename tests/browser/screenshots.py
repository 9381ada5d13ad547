"""Take the README's screenshots: the real app, driven through its real pages.

Run with `scripts/screenshots [output dir]` (default docs/screenshots). Starts the
server on a throwaway SQLite database, logs in as the demo user alice, and writes
upload.png, streaming.png, succeeded.png and failed.png.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

from tests.browser.server import CHROMIUM, CHROMIUM_ARGS, ROOT, USERS, LiveServer

SAMPLE = ROOT / "tests" / "fixtures" / "sample_article.md"
VIEWPORT = {"width": 1200, "height": 820}
TASK_URL = re.compile(r"/tasks/[0-9a-f-]{36}/$")


def submit(page: Page, *, scenario: str = "ok", instructions: str = "") -> None:
    page.goto("/")
    page.set_input_files("input[name=files]", str(SAMPLE))
    page.fill("textarea[name=instructions]", instructions)
    page.select_option("select[name=scenario]", scenario)
    page.click("[data-upload-submit]")
    page.wait_for_url(TASK_URL)


def status_is(page: Page, value: str) -> None:
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", value, timeout=90_000
    )


@contextmanager
def alice_page(prefix: str, viewport: dict, **env) -> Iterator[tuple[Page, LiveServer]]:
    """A Chromium page logged in as the demo user alice (also staff) on a fresh server
    over a throwaway SQLite database; everything is removed afterwards."""
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    server = LiveServer(data_dir, **env).start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            context = browser.new_context(base_url=server.url, viewport=viewport)
            page = context.new_page()
            page.goto("/accounts/login/")
            page.fill("input[name=username]", "alice")
            page.fill("input[name=password]", USERS["alice"])
            page.click("button[type=submit]")
            page.wait_for_url(f"{server.url}/")
            yield page, server
            browser.close()
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def take(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with alice_page(
        "reportline-screens-",
        VIEWPORT,
        REPORTS_SIMULATED_TTFT_S=0.4,
        REPORTS_SIMULATED_TOKENS_PER_S=40,
    ) as (page, server):
        # failed.png: the provider drops the connection after some text.
        submit(page, scenario="error")
        status_is(page, "failed")
        page.evaluate("() => window.scrollTo(0, 0)")
        page.screenshot(path=out / "failed.png", full_page=True)

        # succeeded.png: the rendered report, with its download link.
        submit(page, instructions="Focus on costs and on what cities should do first.")
        expect(page.locator("[data-report-stream]")).not_to_be_empty(timeout=30_000)
        streaming_url = page.url
        status_is(page, "succeeded")
        # From the top: the status bar is sticky, and a full-page shot draws it where the
        # page was scrolled to (following the text down).
        page.evaluate("() => window.scrollTo(0, 0)")
        page.screenshot(path=out / "succeeded.png", full_page=True)

        # streaming.png: text arriving, mid-report.
        submit(page)
        page.wait_for_function(
            "() => document.querySelector('[data-report-stream]').textContent.length > 700"
        )
        page.screenshot(path=out / "streaming.png")

        # upload.png: the form, with the list of reports below it.
        page.goto("/")
        page.set_input_files("input[name=files]", str(SAMPLE))
        page.fill("textarea[name=instructions]", "Focus on costs and risks.")
        expect(page.locator(f"a[href='{streaming_url.split(server.url)[1]}']")).to_be_visible()
        page.screenshot(path=out / "upload.png", full_page=True)
    for name in ("upload", "streaming", "succeeded", "failed"):
        print(out / f"{name}.png")


if __name__ == "__main__":
    take(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshots")
