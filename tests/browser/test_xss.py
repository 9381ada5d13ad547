"""XSS in a real browser: payloads in documents, instructions, file names and the model's
streamed output (split across chunks) never run, on the task page, the home page or in
Django admin. A payload that ran would set `window.__xss` or open a dialog; one that got
into the markup but was stopped by the CSP would raise a `securitypolicyviolation`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import TASK_URL, ask_for_a_fresh_report, serve
from tests.browser.hostile_provider import PAYLOADS
from tests.browser.server import LiveServer

pytestmark = pytest.mark.browser

# No double quote: browsers send it as %22 in a multipart file name.
FILE_NAME = "<img src=x onerror=window.__xss='name'><svg onload=alert(1)>.md"
INSTRUCTIONS = "<script>window.__xss='instructions'</script><img src=x onerror=alert(1)>"
DOCUMENT = (
    "# Harbours <script>window.__xss='document'</script>\n\n"
    "Tidal energy is a predictable source of power in small harbours along the coast. "
    "<img src=x onerror=\"window.__xss='doc-img'\"> Engineers measured the flow at twelve "
    "sites. [link](javascript:window.__xss='doc-link') The best sites had narrow entrances.\n"
)

WATCH = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(e.violatedDirective + " " + e.blockedURI);
});
"""


@pytest.fixture(scope="module")
def hostile_server(data_root, database_template) -> Iterator[LiveServer]:
    yield from serve(
        data_root,
        database_template,
        "hostile",
        settings="tests.browser.settings",
        REPORTS_PROVIDER="hostile",
        REPORTS_POLL_S=0.2,
    )


class Watched:
    """A page whose dialogs are recorded (and dismissed) and whose CSP violations are kept."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        page.add_init_script(WATCH)
        page.on("dialog", self._dialog)
        page.on("request", lambda request: self.requests.append(request.url))

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def assert_nothing_ran(self) -> None:
        assert self.page.evaluate("window.__xss") is None
        assert self.page.evaluate("window.__cspViolations") == []
        assert self.dialogs == []
        # Nothing a payload names was fetched: no `src=x`, no foreign host.
        assert not [u for u in self.requests if u.endswith("/x") or "evil.example" in u]


@pytest.fixture
def watched(open_page, hostile_server) -> Watched:
    return Watched(open_page(hostile_server))


def submit_hostile(watched: Watched) -> str:
    page = watched.page
    page.goto("/")
    page.set_input_files(
        "input[name=files]",
        files=[{"name": FILE_NAME, "mimeType": "text/markdown", "buffer": DOCUMENT.encode()}],
    )
    page.fill("textarea[name=instructions]", INSTRUCTIONS)
    ask_for_a_fresh_report(page)  # each test streams its own report, never an earlier one
    page.click("[data-upload-submit]")
    page.wait_for_url(TASK_URL)
    return TASK_URL.search(page.url)[1]


def test_payloads_streamed_and_rendered_on_the_task_page_never_run(watched):
    page = watched.page
    submit_hostile(watched)
    # Live: the streamed text shows the payloads as text while they arrive in pieces.
    expect(page.locator("[data-report-stream]")).to_contain_text("onerror", timeout=15_000)
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=30_000
    )
    rendered = page.locator("[data-report-rendered]")
    expect(rendered).to_be_visible()
    expect(rendered).to_contain_text("<script>window.__xss='script'</script>")
    # No element of any payload exists; links with bad schemes are text, not links.
    assert rendered.locator("script, iframe, svg, style, details, img").count() == 0
    hrefs = rendered.locator("a").evaluate_all("links => links.map(a => a.href)")
    assert not [h for h in hrefs if re.match(r"\s*(javascript|data|vbscript):", h, re.I)]
    expect(page.locator(".instructions")).to_contain_text(INSTRUCTIONS)
    watched.assert_nothing_ran()

    # The same page rendered by the server after a refresh.
    page.reload()
    expect(rendered).to_be_visible()
    assert rendered.locator("script, iframe, svg, style, details, img").count() == 0
    watched.assert_nothing_ran()


def test_a_hostile_file_name_is_shown_as_text_on_the_home_page_and_in_admin(watched, problems):
    page = watched.page
    # Django admin's pages name no icon, so Chromium asks for /favicon.ico and logs its 404;
    # an injected image would be caught by the request log above, not by this message.
    problems.allow("the server responded with a status of 404")
    task_id = submit_hostile(watched)
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=30_000
    )
    page.goto("/")
    expect(page.locator("body")).to_contain_text(FILE_NAME)
    watched.assert_nothing_ran()

    # alice is the demo's admin: tasks and attempts (with the model's text) in Django admin.
    attempt_id = page.request.get(f"/api/tasks/{task_id}").json()["attempts"][0]["attempt_id"]
    for path in (
        "/admin/reports/attempt/",
        f"/admin/reports/attempt/{attempt_id}/change/",
        "/admin/reports/task/",
        f"/admin/reports/task/{task_id}/change/",
    ):
        response = page.goto(path)
        assert response is not None and response.ok, path
        watched.assert_nothing_ran()
        if path.startswith("/admin/reports/attempt/") and path.endswith("/change/"):
            # The model's text, payloads and all, is on this page: as text.
            expect(page.locator("body")).to_contain_text("<script>window.__xss='script'")
    expect(page.locator("body")).to_contain_text(FILE_NAME)
    expect(page.locator("body")).to_contain_text("window.__xss='instructions'")


def test_every_payload_of_the_provider_was_really_sent(watched):
    """The suite is only as good as its payloads: each one is in the saved report."""
    page = watched.page
    task_id = submit_hostile(watched)
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=30_000
    )
    report = page.request.get(f"/api/tasks/{task_id}/result").text()
    for payload in PAYLOADS:
        assert payload in report
    # And the stream cut payloads in pieces: some payload is in no single delta.
    events = page.request.get(f"/api/tasks/{task_id}/events").text()
    deltas = [
        json.loads(block.split("data: ", 1)[1])["text"]
        for block in events.split("\n\n")
        if "event: delta" in block
    ]
    assert len(deltas) > 3
    assert [p for p in PAYLOADS if not any(p in delta for delta in deltas)]
    watched.assert_nothing_ran()
