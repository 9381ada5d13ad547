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


# How many lines an element's label is set on.
LABEL_LINES = """(e) => {
    const range = document.createRange();
    range.selectNodeContents(e);
    return new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
}"""


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
        assert page.locator(action).evaluate(LABEL_LINES) == 1, action
    assert page.evaluate(NO_SIDEWAYS_SCROLL)


# Every control on the page smaller than a fingertip (about 44 px) either way. Links inside
# the report's running text are text (their citations are tapped below); the skip link is
# off-screen until a keyboard reaches it.
TOO_SMALL = """() => [...document.querySelectorAll(
        "a[href], button, input:not([type=hidden]), select, textarea, summary")]
    .filter((e) => !e.closest(".report, .skip-link, dialog:not([open])"))
    .map((e) => [e, e.getBoundingClientRect()])
    .filter(([e, r]) => r.width && r.height && (r.width < 43.5 || r.height < 43.5))
    .map(([e, r]) => `${e.tagName} "${e.textContent.trim().slice(0, 30)}" `
                     + `${Math.round(r.width)}x${Math.round(r.height)}`)"""


def test_every_control_is_big_enough_to_tap(phone_page, fast_server, sample_file, problems):
    problems.allow("404 (Not Found)")  # the 404 page, asked for
    add_webhook(fast_server, "https://hooks.example.com/in")
    page = phone_page(fast_server)
    page.goto("/settings/webhooks/")
    assert page.evaluate(TOO_SMALL) == [], "webhooks"
    # New secret and Remove side by side: far enough apart for a thumb.
    hook = page.locator("[data-webhook]").first
    new = hook.get_by_role("button", name="New secret").bounding_box()
    remove = hook.get_by_role("button", name="Remove").bounding_box()
    assert new is not None and remove is not None
    assert remove["x"] - (new["x"] + new["width"]) >= 16 or remove["y"] >= new["y"] + 44

    upload(page, sample_file, scenario="error")
    wait_for_status(page, "failed")
    assert page.evaluate(TOO_SMALL) == [], "failed task"

    upload(page, sample_file)
    wait_for_status(page, "succeeded")
    page.locator("[data-share] summary").click()
    page.locator("[data-action=share]").click()
    expect(page.locator("[data-share-url]")).to_be_visible()
    assert page.evaluate(TOO_SMALL) == [], "finished task, shared"

    # A citation answers a tap anywhere on the height of its line, not only on its letters.
    citation = page.locator("[data-report-rendered] p a[data-citation]").first
    citation.scroll_into_view_if_needed()
    box = citation.bounding_box()
    assert box is not None
    for dy in (-14, 14):
        hit = page.evaluate(
            "([x, y]) => document.elementFromPoint(x, y).closest('a[data-citation]')"
            " === document.querySelector('[data-report-rendered] p a[data-citation]')",
            [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2 + dy],
        )
        assert hit, dy

    citation.click()
    source = page.locator("a[data-citation-page]")
    expect(source).to_be_visible()
    source.click()
    expect(page.locator("[data-source-passage]")).to_be_visible()
    assert page.evaluate(TOO_SMALL) == [], "source page"

    page.goto("/")
    assert page.evaluate(TOO_SMALL) == [], "home page with its list"
    page.goto("/no-such-page/")
    assert page.evaluate(TOO_SMALL) == [], "404 page"
