"""Headless Chromium for the page benchmarks (Debian's, through Playwright)."""

from __future__ import annotations

from contextlib import contextmanager
from urllib.parse import urlparse

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Every page notes when the click happened and every change of the streamed text, on
# the page's wall clock (timeOrigin + now), so a click and the text on the next page
# can be compared.
MARKS = """
(() => {
  const now = () => performance.timeOrigin + performance.now();
  window.__marks = [];
  const clicked = () => sessionStorage.setItem("__clickAt", String(now()));
  document.addEventListener("click", clicked, true);
  document.addEventListener("DOMContentLoaded", () => {
    const el = document.querySelector("[data-report-stream]");
    if (!el) return;
    new MutationObserver(() => { if (el.textContent.length) window.__marks.push(now()); })
      .observe(el, {childList: true, characterData: true, subtree: true});
  });
})();
"""


@contextmanager
def chromium():
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def logged_in(browser, base_url: str, cookie: str):
    """Return a browser context holding the bench user's session, with MARKS installed."""
    context = browser.new_context(bypass_csp=True)  # to let the benchmark read its marks
    host = urlparse(base_url).hostname
    context.add_cookies([{"name": "sessionid", "value": cookie, "domain": host, "path": "/"}])
    context.add_init_script(MARKS)
    return context


def ask_for_a_fresh_report(page) -> None:
    """Drop the upload form's reuse=1: a new task even when an earlier report would do."""
    page.evaluate(
        """() => document.querySelector("form[data-upload] input[name=reuse]").remove()"""
    )
