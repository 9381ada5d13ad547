"""axe-core finds nothing on the pages a user meets — upload, streaming, finished, failed,
cancelled and the webhooks settings — on a desktop and on a phone; a phone never hides
the user's own words behind a sideways scroll; and a screen reader hears a report start
and end once, not each batch of its text or each tick of the status line's clocks."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.accessibility import violations
from tests.browser.helpers import upload

pytestmark = pytest.mark.browser

VIEWPORTS = {
    "desktop": {"viewport": {"width": 1366, "height": 800}},
    "phone": {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True},
}
LONG_INSTRUCTIONS = "Focus on the costs of maintenance and on https://example.org/" + "x" * 120


@pytest.fixture(params=list(VIEWPORTS))
def viewport_page(request, browser, open_page, problems) -> Callable[..., Page]:
    """Return page(server): alice's logged-in page at the viewport of the parameter."""
    contexts = []

    def make(server) -> Page:
        state = open_page(server).context.storage_state()
        context = browser.new_context(
            base_url=server.url, storage_state=state, **VIEWPORTS[request.param]
        )
        contexts.append(context)
        return problems.watch(context.new_page())

    yield make
    for context in contexts:
        context.close()


def assert_accessible(page: Page, what: str) -> None:
    assert violations(page) == [], what


def wait_for_status(page: Page, value: str) -> None:
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", value, timeout=30_000
    )


def test_the_upload_and_finished_pages(viewport_page, fast_server, sample_file):
    page = viewport_page(fast_server)
    page.goto("/settings/webhooks/")
    assert_accessible(page, "webhooks page")
    page.goto("/")
    assert_accessible(page, "upload page")
    upload(page, sample_file, instructions=LONG_INSTRUCTIONS)
    wait_for_status(page, "succeeded")
    assert_accessible(page, "finished page")


def test_the_streaming_and_cancelled_pages(viewport_page, slow_server, sample_file):
    page = viewport_page(slow_server)
    upload(page, sample_file, scenario="slow", instructions=LONG_INSTRUCTIONS)
    page.wait_for_function(
        "() => document.querySelector('[data-report-stream]').textContent.length > 20"
    )
    assert_accessible(page, "streaming page")
    page.click("[data-action=cancel]")
    wait_for_status(page, "cancelled")
    assert_accessible(page, "cancelled page")


def test_the_failed_page_and_its_instructions_wrap(viewport_page, fast_server, sample_file):
    page = viewport_page(fast_server)
    upload(page, sample_file, scenario="error", instructions=LONG_INSTRUCTIONS)
    wait_for_status(page, "failed")
    assert_accessible(page, "failed page")
    # The user's own words wrap: nothing on the page scrolls sideways.
    assert page.evaluate(
        "() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )
    instructions = page.locator(".instructions")
    assert instructions.evaluate("e => e.scrollWidth <= e.clientWidth")


# Installed before the page's scripts: every text a live region comes to hold, in order.
LISTEN = """() => {
    window.liveTexts = [];
    const live = '[aria-live]:not([aria-live="off"]), [role=status], [role=alert], [role=log]';
    new MutationObserver((changes) => {
        const regions = new Set();
        for (const change of changes) {
            const node = change.target.nodeType === 1 ? change.target : change.target.parentElement;
            const region = node && node.closest(live);
            if (region) regions.add(region);
        }
        for (const region of regions) {
            const text = region.textContent.replace(/\\s+/g, " ").trim();
            if (text) window.liveTexts.push(text);
        }
    }).observe(document, {subtree: true, childList: true, characterData: true});
}"""


def announced(page: Page) -> list[str]:
    return page.evaluate("() => window.liveTexts")


def test_a_screen_reader_hears_the_start_and_the_end_once(open_page, slow_server, sample_file):
    page = open_page(slow_server)
    page.add_init_script(script=f"({LISTEN})()")
    upload(page, sample_file, scenario="slow")
    stream = page.locator("[data-report-stream]")
    expect(stream).to_have_attribute("aria-busy", "true")
    # Neither the text nor anything around it is read aloud as it grows.
    live = '[aria-live]:not([aria-live="off"]), [role=status], [role=alert], [role=log]'
    assert stream.evaluate("(e, live) => e.closest(live)", live) is None
    assert stream.evaluate("(e, live) => e.querySelector(live)", live) is None
    wait_for_status(page, "succeeded")
    expect(page.locator("[data-announcer]")).to_have_text("The report is ready.")
    assert page.evaluate("() => window.reportline.stats.flushes") > 10
    said = announced(page)
    assert said.count("The report is ready.") == 1, said
    assert "Started: the report appears below as it is written." in said, said
    # The start, perhaps the finalizing, the end: not a line for each event or batch.
    assert len(said) <= 4, said
    expect(page.locator("[data-report-rendered]")).not_to_have_attribute("aria-busy", "true")


def test_a_failure_and_a_cancel_are_said_in_words(open_page, fast_server, slow_server, sample_file):
    page = open_page(fast_server)
    page.add_init_script(script=f"({LISTEN})()")
    upload(page, sample_file, scenario="error")
    wait_for_status(page, "failed")
    announcer = page.locator("[data-announcer]")
    expect(announcer).to_contain_text("The report failed.")
    reason = page.locator("[data-incomplete] .incomplete-reason").inner_text()
    expect(announcer).to_contain_text(reason)
    expect(page.locator("[data-report-stream]")).not_to_have_attribute("aria-busy", "true")

    page = open_page(slow_server)
    page.add_init_script(script=f"({LISTEN})()")
    upload(page, sample_file, scenario="slow")
    page.wait_for_function(
        "() => document.querySelector('[data-report-stream]').textContent.length > 20"
    )
    page.locator("[data-action=cancel]").focus()
    page.keyboard.press("Enter")
    wait_for_status(page, "cancelled")
    expect(page.locator("[data-announcer]")).to_have_text(
        "The report was stopped. Cancelled by you."
    )
    # Said in words on the page too, not by the badge's colour alone.
    expect(page.locator("[data-task-status]")).to_contain_text("Cancelled")
    expect(page.locator("[data-incomplete]")).to_contain_text("Cancelled by you.")
    assert announced(page).count("The report was stopped. Cancelled by you.") == 1


def test_a_refused_upload_is_tied_to_its_field(open_page, fast_server, sample_file):
    page = open_page(fast_server)
    page.goto("/")
    files = page.locator("input[name=files]")
    page.keyboard.press("Tab")  # the skip link, then on by the keyboard alone
    page.locator("[data-upload-submit]").focus()
    page.keyboard.press("Enter")
    # The focus is on the field, and the field says it is wrong and why.
    expect(files).to_be_focused()
    expect(files).to_have_attribute("aria-invalid", "true")
    expect(files).to_have_accessible_description(re.compile("Choose at least one file"))
    page.set_input_files("input[name=files]", str(sample_file))
    expect(files).not_to_have_attribute("aria-invalid", "true")
    expect(files).to_have_attribute("aria-describedby", "upload-files-help")


def test_sharing_by_keyboard_keeps_the_focus_on_what_the_answer_says(
    open_page, fast_server, sample_file
):
    page = open_page(fast_server)
    upload(page, sample_file)
    wait_for_status(page, "succeeded")
    share = page.locator("[data-share]")
    share.locator("summary").focus()
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    expect(share.get_by_label("Works for")).to_be_focused()
    page.keyboard.press("Enter")
    # The new link has the focus, selected: said by its label, copied with one key.
    link = page.locator("[data-share-url]")
    expect(link).to_be_focused()
    assert link.evaluate("e => e.selectionEnd - e.selectionStart") == len(link.input_value())
    page.locator("[data-action=revoke-shares]").focus()
    page.keyboard.press("Enter")
    outcome = share.locator("[data-share-outcome]")
    expect(outcome).to_have_text("1 link revoked.")
    expect(outcome).to_be_focused()
