"""On a phone (375 by 667 px, touch) and a tablet: nothing the user must read or copy runs off
the screen, the finished report gets the screen to itself, and what is tapped is big
enough to tap."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

from tests.browser.helpers import upload

pytestmark = pytest.mark.browser

PHONE = {"viewport": {"width": 375, "height": 667}, "is_mobile": True, "has_touch": True}
NO_SIDEWAYS_SCROLL = (
    "() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"
)


@pytest.fixture
def phone_page(browser, open_page, problems) -> Callable[..., Page]:
    """Return page(server): alice's logged-in page on a phone."""
    contexts = []

    def make(server, device: dict = PHONE) -> Page:
        state = open_page(server).context.storage_state()
        context = browser.new_context(base_url=server.url, storage_state=state, **device)
        contexts.append(context)
        return problems.watch(context.new_page())

    yield make
    for context in contexts:
        context.close()


def add_webhook(server, url: str) -> None:
    """Register an endpoint for alice directly (the servers refuse loopback addresses)."""
    server.manage(
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; "
        "from reports.models import WebhookEndpoint; "
        "from reports.webhooks import endpoints, sealing; "
        "WebhookEndpoint.objects.create(user=get_user_model().objects.get(username='alice'), "
        f"url={url!r}, sealed_secret=sealing.seal(endpoints.new_secret()))",
    )


def test_a_new_webhook_secret_fits_a_phone(phone_page, fast_server):
    url = "https://hooks.example.com/reportline/a-path-segment-far-too-long-to-fit-one-line"
    add_webhook(fast_server, url)
    page = phone_page(fast_server)
    page.goto("/settings/webhooks/")
    hook = page.locator("[data-webhook]", has_text=url).first
    hook.get_by_role("button", name="New secret").click()
    secret = page.locator("[data-webhook-secret] code")
    expect(secret).to_contain_text("whsec_")
    # Shown this once: the whole of it is on the screen, nothing behind a sideways scroll.
    assert page.evaluate(NO_SIDEWAYS_SCROLL)
    box = secret.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375
    assert secret.evaluate("e => e.scrollWidth <= e.clientWidth")
    # The address field is a field a thumb can hit, as wide as the form.
    field = page.locator("input[name=url]").bounding_box()
    assert field is not None and field["height"] >= 40 and field["width"] > 300


def wait_for_status(page: Page, value: str) -> None:
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", value, timeout=60_000
    )


def test_a_finished_report_gets_the_whole_phone_screen(phone_page, fast_server, sample_file):
    page = phone_page(fast_server)
    upload(page, sample_file)
    wait_for_status(page, "succeeded")
    sources = page.locator("[data-report-rendered] :is(h2, h3)", has_text="Sources")
    sources.scroll_into_view_if_needed()
    # Reading the report, nothing covers it: the bar with the downloads stayed at the top.
    bar = page.locator("[data-status-bar]")
    expect(bar).not_to_be_in_viewport()
    box = sources.bounding_box()
    assert box is not None and box["y"] >= 0
    assert (
        page.evaluate("() => document.elementFromPoint(180, 80).closest('[data-status-bar]')")
        is None
    )


def test_a_reader_who_followed_to_the_end_on_a_phone_gets_the_report_from_its_title(
    phone_page, long_server, sample_file
):
    page = phone_page(long_server)
    upload(page, sample_file)
    page.wait_for_function(
        "() => document.querySelector('[data-report-stream]').textContent.length > 12000"
    )
    wait_for_status(page, "succeeded")
    title = page.locator("[data-report-rendered] h2:first-child")
    expect(title).to_be_in_viewport(ratio=1)  # the whole title, not a sliver of it
    box = title.bounding_box()
    assert box is not None
    # ...and nothing above it covers it.
    hit = page.evaluate(
        "([x, y]) => document.elementFromPoint(x, y).closest('[data-report-rendered] h2')",
        [box["x"] + 10, box["y"] + box["height"] / 2],
    )
    assert hit is not None


def test_while_it_runs_the_status_and_cancel_stay_in_view_on_a_phone(
    phone_page, slow_server, sample_file
):
    page = phone_page(slow_server)
    upload(page, sample_file, scenario="slow")
    page.wait_for_function(
        "() => document.querySelector('[data-report-stream]').textContent.length > 300"
    )
    page.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight)")
    expect(page.locator("[data-action=cancel]")).to_be_in_viewport()
    page.click("[data-action=cancel]")
    wait_for_status(page, "cancelled")


def test_the_finished_bar_on_a_tablet_keeps_each_label_on_one_line(
    phone_page, fast_server, sample_file
):
    tablet = {"viewport": {"width": 768, "height": 1024}, "has_touch": True}
    page = phone_page(fast_server, tablet)
    upload(page, sample_file)
    wait_for_status(page, "succeeded")
    for action in (
        "a[data-download][data-format=md]",
        "[data-action=copy]",
        "[data-action=copy-markdown]",
    ):
        button = page.locator(action)
        # One line of label: the button is less than two lines high.
        line = button.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)")
        box = button.bounding_box()
        assert box is not None and box["height"] < 2 * line, action
    assert page.evaluate(NO_SIDEWAYS_SCROLL)
