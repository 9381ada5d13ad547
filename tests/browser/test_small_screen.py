"""On a phone (375 by 667 px, touch) and a tablet: nothing the user must read or copy runs off
the screen, the finished report gets the screen to itself, and what is tapped is big
enough to tap."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from playwright.sync_api import Page, expect

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
