"""Share links on the task page: the owner makes one, a reader with no account opens it
and follows a citation, the owner revokes every link, and the link is gone."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.accessibility import violations
from tests.browser.helpers import upload

pytestmark = pytest.mark.browser


def test_the_owner_shares_a_report_and_revokes_the_link(
    open_page, fast_server, browser, sample_file, problems
):
    page = open_page(fast_server)
    upload(page, sample_file)
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=30_000
    )
    share = page.locator("[data-share]")
    share.locator("summary").click()
    share.get_by_label("Works for").fill("3")
    share.locator("[data-action=share]").click()
    url = page.locator("[data-share-url]").input_value()
    assert f"{fast_server.url}/shared/" in url
    expect(share.locator("[data-share-link]")).to_have_count(1)
    assert violations(page) == []

    reader = browser.new_context(base_url=fast_server.url)
    try:
        shared = reader.new_page()
        response = shared.goto(url)
        assert response.status == 200
        report = shared.locator("[data-report-rendered]")
        expect(report.locator("h1")).to_be_visible()
        assert violations(shared) == []
        report.locator("a[data-citation]").first.click()
        expect(shared.locator("[data-source-passage]")).not_to_be_empty()
        shared.locator("[data-back-to-report]").click()
        expect(report.locator("h1")).to_be_visible()

        problems.allow("status of 404")
        share.locator("[data-action=revoke-shares]").click()
        expect(share.locator("[data-share-none]")).to_be_visible()
        assert shared.reload().status == 404
        expect(shared.locator("[data-shared-message]")).to_contain_text("Link not found")
    finally:
        reader.close()


# Posts the share form's request as often as the page's own form would, with its token.
MAKE_LINKS = """async ({url, count}) => {
  const token = JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRFToken"];
  for (let i = 0; i < count; i++) {
    await fetch(url, {method: "POST", headers: {"X-CSRFToken": token},
                      body: new URLSearchParams({expires_in_days: "1"})});
  }
}"""
# What a tab left open while its user signed in again elsewhere holds: tokens that no
# longer match the session's.
GO_STALE = """() => {
  document.body.setAttribute("hx-headers", JSON.stringify({"X-CSRFToken": "x".repeat(64)}));
  for (const field of document.querySelectorAll("[name=csrfmiddlewaretoken]")) {
    field.value = "x".repeat(64);
  }
}"""


def test_a_refused_share_says_why_on_the_page(open_page, fast_server, sample_file, problems):
    page = open_page(fast_server)
    task_id = upload(page, sample_file)
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=30_000
    )
    page.evaluate(MAKE_LINKS, {"url": f"/tasks/{task_id}/share/", "count": 20})
    page.reload()
    share = page.locator("[data-share]")
    expect(share.locator("[data-share-link]")).to_have_count(20)

    problems.allow("status of 409", "status of 403", "Response Status Error Code 403")
    share.locator("[data-action=share]").click()
    expect(share.locator("[data-share-error]")).to_contain_text("already has 20 live links")
    expect(share.locator("[data-share-link]")).to_have_count(20)

    page.evaluate(GO_STALE)
    share.locator("[data-action=revoke-shares]").click()
    expect(share.locator("[data-request-error]")).to_contain_text("Reload the page")
    expect(share.locator("[data-share-link]")).to_have_count(20)  # nothing was revoked
    assert violations(page) == []
