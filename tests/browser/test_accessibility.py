"""axe-core finds nothing on the pages a user meets — upload, streaming, finished, failed,
cancelled and the webhooks settings — on a desktop and on a phone; and a phone never hides
the user's own words behind a sideways scroll."""

from __future__ import annotations

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
