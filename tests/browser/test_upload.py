"""The home page: upload, rejected files, one task per form, the list of reports."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import TASK_URL, ask_for_a_fresh_report, upload

pytestmark = pytest.mark.browser


def task_count(page) -> int:
    return len(page.request.get("/api/tasks").json()["tasks"])


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("picture.png", b"\x89PNG\r\n\x1a\n", "only .txt .md .html .pdf .docx files are accepted"),
        ("empty.md", b"   \n", "empty.md is empty."),
    ],
)
def test_a_rejected_file_shows_the_apis_message(
    open_page, fast_server, problems, name, content, message
):
    problems.allow("Failed to load resource")  # the 4xx answer itself
    page = open_page(fast_server)
    page.goto("/")
    before = task_count(page)
    page.set_input_files(
        "input[name=files]", files=[{"name": name, "mimeType": "text/plain", "buffer": content}]
    )
    page.click("[data-upload-submit]")
    error = page.locator("[data-upload-error]")
    expect(error).to_be_visible()
    expect(error).to_contain_text(message)
    expect(page.locator("[data-upload-submit]")).to_be_enabled()
    assert page.url.endswith("/")
    assert task_count(page) == before


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            {"error": {"code": "rate_limited", "message": "You made 30; try again in 41 s."}},
            "You made 30; try again in 41 s.",
        ),
        ({}, "Too many reports for now. Try again in 41 s."),  # no words: the header's
    ],
)
def test_a_refusal_for_now_says_when_to_try_again_once(
    open_page, fast_server, sample_file, problems, body, said
):
    """The server's 429 (its own answer is in tests/test_uploads.py) shown as it says it."""
    problems.allow("Failed to load resource")
    page = open_page(fast_server)
    page.goto("/")
    page.route(
        "**/api/tasks",
        lambda route: route.fulfill(status=429, headers={"Retry-After": "41"}, json=body),
    )
    page.set_input_files("input[name=files]", str(sample_file))
    page.click("[data-upload-submit]")
    expect(page.locator("[data-upload-error]")).to_have_text(said)


def test_no_file_chosen_is_said_before_sending(open_page, fast_server):
    page = open_page(fast_server)
    page.goto("/")
    page.click("[data-upload-submit]")
    expect(page.locator("[data-upload-error]")).to_have_text("Choose at least one file to upload.")


def test_documents_longer_than_one_call_are_said_to_be_read_in_parts_before_sending(
    open_page, fast_server
):
    page = open_page(fast_server)
    page.goto("/")
    estimate = page.locator("[data-plan-estimate]")
    small = {"name": "short.md", "mimeType": "text/plain", "buffer": b"# A note\n\nShort.\n"}
    page.set_input_files("input[name=files]", files=[small])
    expect(estimate).to_be_hidden()
    long = {"name": "manual.txt", "mimeType": "text/plain", "buffer": b"A sentence. " * 100_000}
    page.set_input_files("input[name=files]", files=[long])
    expect(estimate).to_be_visible()
    expect(estimate).to_contain_text("About 1,200,000 characters")
    expect(estimate).to_contain_text(re.compile(r"read in about \d+ parts"))


def test_a_double_click_creates_one_task(open_page, fast_server, sample_file):
    page = open_page(fast_server)
    page.goto("/")
    before = task_count(page)
    ask_for_a_fresh_report(page)
    page.set_input_files("input[name=files]", str(sample_file))
    page.locator("[data-upload-submit]").dblclick()
    page.wait_for_url(TASK_URL)
    assert task_count(page) == before + 1


def test_a_resent_form_creates_one_task(open_page, fast_server, sample_file):
    """The same form sent twice (the button's guard bypassed) replays the first task."""
    page = open_page(fast_server)
    page.goto("/")
    before = task_count(page)
    ask_for_a_fresh_report(page)
    page.set_input_files("input[name=files]", str(sample_file))
    statuses = page.evaluate(
        """async () => {
            const form = document.querySelector("form[data-upload]");
            const send = () => fetch(form.action, {
                method: "POST",
                body: new FormData(form),
                headers: {
                    "Idempotency-Key": form.dataset.idempotencyKey,
                    "X-CSRFToken": form.querySelector("[name=csrfmiddlewaretoken]").value,
                },
            });
            const first = await send();
            const second = await send();
            return [first.status, second.status, (await first.json()).task_id,
                    (await second.json()).task_id];
        }"""
    )
    assert statuses[:2] == [201, 200]
    assert statuses[2] == statuses[3]
    assert task_count(page) == before + 1


def test_the_list_shows_each_reports_status_live(open_page, fast_server, sample_file):
    page = open_page(fast_server)
    task_id = upload(page, sample_file, scenario="stall")
    page.goto("/")
    badge = page.locator(f"li.task-row:has(a[href='/tasks/{task_id}/']) [data-status]")
    expect(badge).to_have_attribute("data-status", re.compile("^(queued|running)$"))
    # No reload: the list polls itself while a report is on its way.
    expect(badge).to_have_attribute("data-status", "failed")
    row = page.locator(f"li.task-row:has(a[href='/tasks/{task_id}/'])")
    expect(row).to_contain_text("stalled")


def test_the_same_documents_again_offer_the_earlier_report_then_a_fresh_one(
    open_page, fast_server, sample_file
):
    page = open_page(fast_server)
    path = sample_file.with_name("written-twice.md")  # this test's own document
    path.write_text(sample_file.read_text() + "\nWritten twice.\n")
    first = upload(page, path)
    status = page.locator("[data-task-status]")
    expect(status).to_have_attribute("data-task-status", "succeeded")

    page.goto("/")
    page.set_input_files("input[name=files]", str(path))
    page.click("[data-upload-submit]")
    page.wait_for_url(re.compile(rf"/tasks/{first}/\?reused=1$"))
    notice = page.locator("[data-reused]")
    expect(notice).to_contain_text("written earlier from the same documents")
    expect(notice).not_to_contain_text("nothing was charged")
    expect(page.locator("[data-report-rendered]")).to_be_visible()

    page.click("[data-action=fresh]")
    page.wait_for_url(TASK_URL)
    assert TASK_URL.search(page.url)[1] != first
    expect(page.locator("[data-reused]")).to_have_count(0)
    expect(status).to_have_attribute("data-task-status", "succeeded")
