"""Take the README's screenshots: the real app, driven through its real pages.

Run with `scripts/screenshots [output dir]` (default docs/screenshots). Starts the
server on a throwaway SQLite database, logs in as the demo user alice, has reports
written of a real document from the parser corpus (SQLite's "Appropriate Uses For
SQLite", a two-column PDF), and writes upload.png, streaming.png, succeeded.png,
citations.png (a citation's passage open over the report), source.png (the source page
of a cited passage), shared.png (the report as a reader of its share link sees it) and
failed.png at a desktop's width, and phone-streaming.png and
phone-succeeded.png at a phone's. The PNGs are made smaller with pngquant and optipng
when they are installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

from tests.browser.server import CHROMIUM, CHROMIUM_ARGS, ROOT, USERS, LiveServer

DOCUMENT = ROOT / "tests" / "fixtures" / "corpus" / "sqlite-whentouse-two-column.pdf"
INSTRUCTIONS = "Focus on when a client/server database is the better choice."
VIEWPORT = {"width": 1200, "height": 820}
CITATIONS_VIEWPORT = {"width": 1200, "height": 1300}
PHONE = {"width": 390, "height": 844}
TASK_URL = re.compile(r"/tasks/[0-9a-f-]{36}/$")


def submit(page: Page, *, scenario: str = "ok", instructions: str = "") -> None:
    page.goto("/")
    page.set_input_files("input[name=files]", str(DOCUMENT))
    page.fill("textarea[name=instructions]", instructions)
    page.select_option("select[name=scenario]", scenario)
    page.click("[data-upload-submit]")
    page.wait_for_url(TASK_URL)


def status_is(page: Page, value: str) -> None:
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", value, timeout=90_000
    )


def text_longer_than(page: Page, chars: int) -> None:
    page.wait_for_function(
        f"() => document.querySelector('[data-report-stream]').textContent.length > {chars}",
        timeout=60_000,
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


def phone_of(page: Page, server: LiveServer) -> Page:
    """A phone-sized page in the same session as `page`."""
    context = page.context.browser.new_context(
        base_url=server.url,
        viewport=PHONE,
        is_mobile=True,
        has_touch=True,
        storage_state=page.context.storage_state(),
    )
    return context.new_page()


def from_the_top(page: Page, path: Path) -> None:
    # The status bar is sticky, and a full-page shot draws it where the page was
    # scrolled to (following the text down).
    page.evaluate("() => window.scrollTo(0, 0)")
    page.screenshot(path=path, full_page=True)


def optimise(paths: list[Path]) -> None:
    """Make the PNGs smaller with the tools that are installed; keep them as they are
    where a tool is missing or would not make one smaller."""
    for path in paths:
        if shutil.which("pngquant"):
            # Exits 98 or 99 when the result would be larger or worse; the file is kept.
            quantise = ["pngquant", "--force", "--skip-if-larger", "--strip", "--quality=75-98"]
            subprocess.run([*quantise, "--output", str(path), str(path)], check=False)
        if shutil.which("optipng"):
            subprocess.run(["optipng", "-quiet", "-o2", "-strip", "all", str(path)], check=True)


def take(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    with alice_page(
        "reportline-screens-",
        VIEWPORT,
        REPORTS_SIMULATED_TTFT_S=0.4,
        REPORTS_SIMULATED_TOKENS_PER_S=40,
    ) as (page, server):
        phone = phone_of(page, server)

        # failed.png: the provider drops the connection after some text.
        submit(page, scenario="error")
        status_is(page, "failed")
        from_the_top(page, out / "failed.png")

        # succeeded.png: the rendered report, with its download link.
        submit(page, instructions=INSTRUCTIONS)
        expect(page.locator("[data-report-stream]")).not_to_be_empty(timeout=30_000)
        succeeded_url = page.url
        status_is(page, "succeeded")
        from_the_top(page, out / "succeeded.png")
        phone.goto(succeeded_url)
        status_is(phone, "succeeded")
        phone.screenshot(path=out / "phone-succeeded.png")

        # citations.png and source.png: the key points with their citations, one's
        # passage open over the report, then that passage's own source page. The
        # dialog sits in the middle of the screen, so a taller one keeps the cited
        # sentences above it in sight.
        page.set_viewport_size(CITATIONS_VIEWPORT)
        points = page.locator("[data-report-rendered] ul:has(a[data-citation])").first
        points.evaluate("(list) => window.scrollBy(0, list.getBoundingClientRect().top - 150)")
        points.locator("a[data-citation]").nth(3).click()
        dialog = page.locator("[data-citation-dialog]")
        expect(dialog).to_be_visible()
        expect(dialog.locator("[data-citation-place]")).not_to_be_empty()
        page.screenshot(path=out / "citations.png")
        dialog.locator("a[data-citation-page]").click()
        expect(page.locator("[data-source-passage]")).not_to_be_empty()
        page.set_viewport_size(VIEWPORT)
        page.screenshot(path=out / "source.png", full_page=True)

        # shared.png: the same report as a reader with its share link sees it, signed out.
        page.goto(succeeded_url)
        page.locator("[data-share] summary").click()
        page.locator("[data-action=share]").click()
        shared_url = page.locator("[data-share-url]").input_value()
        reader = page.context.browser.new_context(base_url=server.url, viewport=VIEWPORT)
        shared = reader.new_page()
        shared.goto(shared_url)
        expect(shared.locator("[data-report-rendered] h1")).to_be_visible()
        shared.screenshot(path=out / "shared.png")
        reader.close()

        # streaming.png: text arriving, mid-report, on a desktop and on a phone.
        submit(page)
        text_longer_than(page, 700)
        page.screenshot(path=out / "streaming.png")
        phone.goto(page.url)
        text_longer_than(phone, 900)
        status_is(phone, "running")
        phone.screenshot(path=out / "phone-streaming.png")

        # upload.png: the form, with the list of reports below it.
        page.goto("/")
        page.set_input_files("input[name=files]", str(DOCUMENT))
        page.fill("textarea[name=instructions]", "Focus on the limits of each use.")
        expect(page.locator(f"a[href='{succeeded_url.split(server.url)[1]}']")).to_be_visible()
        page.screenshot(path=out / "upload.png", full_page=True)
    names = (
        "upload",
        "streaming",
        "succeeded",
        "citations",
        "source",
        "shared",
        "failed",
        "phone-streaming",
        "phone-succeeded",
    )
    shots = [out / f"{name}.png" for name in names]
    optimise(shots)
    return shots


if __name__ == "__main__":
    for shot in take(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshots"):
        print(shot)
