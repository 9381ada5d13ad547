"""The task page, live: streaming, rendering once, refresh, cancel, failures, ownership."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import stream_text, task_json, upload
from tests.helpers import report_body
from tests.parsers import samples

pytestmark = pytest.mark.browser

STATUS = "[data-task-status]"


def wait_for_status(page, value: str, timeout: float = 30_000) -> None:
    expect(page.locator(STATUS)).to_have_attribute("data-task-status", value, timeout=timeout)


def wait_for_text(page, at_least: int = 1) -> str:
    page.wait_for_function(
        "n => document.querySelector('[data-report-stream]').textContent.length >= n",
        arg=at_least,
    )
    return stream_text(page)


def download(page) -> str:
    with page.expect_download() as info:
        page.click("a[data-download]")
    return info.value.path().read_text()


def test_text_streams_then_the_report_is_rendered_once_it_succeeded(
    open_page, slow_server, sample_file
):
    page = open_page(slow_server)
    task_id = upload(page, sample_file)

    early = wait_for_text(page, 40)
    assert early.startswith("# ")
    assert page.locator(STATUS).get_attribute("data-task-status") == "running"
    expect(page.locator("[data-cost]")).to_have_attribute("data-cost", "reserved")
    expect(page.locator("[data-report-rendered]")).to_be_hidden()
    expect(page.locator("a[data-download]")).to_have_count(0)
    expect(page.locator("[data-incomplete]")).to_be_hidden()

    # A second tab on the same task follows live too.
    other = open_page(slow_server)
    other.goto(page.url)
    expect(other.locator("[data-report-stream]")).not_to_be_empty()

    wait_for_status(page, "succeeded")
    rendered = page.locator("[data-report-rendered]")
    expect(rendered).to_be_visible()
    # One h1 a page, the documents' name: the report's title and sections sit under it.
    expect(page.locator("h1")).to_have_count(1)
    expect(rendered.locator("h2")).to_have_count(1)
    expect(rendered.locator("h3", has_text="Summary")).to_be_visible()
    expect(page.locator("[data-report-stream]")).to_be_hidden()
    expect(page.locator("[data-incomplete]")).to_be_hidden()
    expect(page.locator("[data-action=cancel]")).to_have_count(0)
    # The money line follows too: what the report cost, no longer what it holds.
    expect(page.locator("[data-cost]")).to_have_attribute("data-cost", "settled")
    # To the cent, a sub-cent amount as "< $0.01", never "$0.0004".
    expect(page.locator("[data-cost]")).to_have_text(re.compile(r"cost (< \$0\.01|\$\d+\.\d\d)$"))

    report = download(page)
    assert report.startswith("# ")
    assert stream_text(page).rstrip() == report_body(report)  # every passage once, none missing

    wait_for_status(other, "succeeded")
    assert stream_text(other).rstrip() == report_body(report)

    timings = task_json(page, task_id)["timings"]
    assert timings["frontend_first_text_ms"] > 0


def test_refresh_mid_stream_continues_with_no_gap_and_no_repeat(
    open_page, slow_server, sample_file
):
    page = open_page(slow_server)
    upload(page, sample_file)
    before = wait_for_text(page, 60)

    page.reload()
    # The text so far is in the page as served, with the seq it covers.
    served = stream_text(page)
    assert served.startswith(before)
    assert int(page.locator("[data-report-stream]").get_attribute("data-seq")) > 0

    wait_for_status(page, "succeeded")
    assert stream_text(page).rstrip() == report_body(download(page))


def test_cancel_mid_stream_keeps_the_partial_text(open_page, slow_server, sample_file):
    page = open_page(slow_server)
    task_id = upload(page, sample_file)
    wait_for_text(page, 30)

    page.click("[data-action=cancel]")
    wait_for_status(page, "cancelled")
    incomplete = page.locator("[data-incomplete]")
    expect(incomplete).to_be_visible()
    expect(incomplete).to_contain_text("Cancelled by you.")
    # Said once, by the notice: no second "Cancelled." line; the focus is on the status.
    expect(page.locator("[data-cancel-outcome]")).to_be_hidden()
    status = page.locator("[data-status-region]")
    expect(status).to_be_focused()
    # Focused after a click: no outlined box (once drawn around the empty rest of the bar).
    assert status.evaluate("e => getComputedStyle(e).outlineStyle") == "none"
    stream = page.locator("[data-report-stream]")
    expect(stream).to_be_visible()
    kept = stream_text(page)
    assert len(kept) >= 30
    expect(page.locator("[data-report-rendered]")).to_be_hidden()
    expect(page.locator("a[data-download]")).to_have_count(0)

    body = task_json(page, task_id)
    assert body["status"] == "cancelled" and body["partial"] is True
    assert body["text_length"] == len(kept)

    page.reload()  # the same, from the server
    wait_for_status(page, "cancelled")
    expect(page.locator("[data-incomplete]")).to_contain_text("Cancelled by you.")
    assert stream_text(page) == kept


def test_a_cancel_that_comes_too_late_says_so(open_page, slow_server, sample_file, problems):
    problems.allow("409 (Conflict)")
    page = open_page(slow_server)
    upload(page, sample_file)
    wait_for_text(page, 10)
    held = []

    def hold(route) -> None:
        held.append(route)  # the request leaves only when the test says

    page.route("**/cancel", hold)
    page.click("[data-action=cancel]")
    outcome = page.locator("[data-cancel-outcome]")
    expect(outcome).to_have_text("Cancelling…")

    wait_for_status(page, "succeeded")
    too_late = "The report finished before the cancel took effect."
    expect(outcome).to_have_text(too_late)
    with page.expect_response("**/cancel") as answer:
        held[0].continue_()
    assert answer.value.status == 409  # the server agrees: task_finished
    expect(outcome).to_have_text(too_late)
    expect(page.locator("[data-incomplete]")).to_be_hidden()
    expect(page.locator("[data-report-rendered]")).to_be_visible()


def test_a_cancel_refused_is_read_by_its_code_not_its_words(
    open_page, slow_server, sample_file, problems
):
    problems.allow("409 (Conflict)")
    page = open_page(slow_server)
    upload(page, sample_file)
    wait_for_text(page, 10)
    # Each refusal's words say the opposite of its code: only the code may count.
    answer = {}
    page.route("**/cancel", lambda route: route.fulfill(status=409, json={"error": answer}))
    cancel = page.locator("[data-action=cancel]")
    outcome = page.locator("[data-cancel-outcome]")
    region = page.locator("[data-status-region]")  # focused once the answer was read

    answer.update(code="other_conflict", message="The report finished first.")
    cancel.click()
    expect(region).to_be_focused()
    expect(outcome).to_have_text("The report finished first.")  # said, and not taken as an end
    expect(cancel).to_be_enabled()

    # The task ended, and the page has not heard how yet: it says so once the status does.
    answer.update(code="task_finished", message="The task ended before the cancel.")
    cancel.click()
    expect(region).to_be_focused()
    expect(outcome).to_have_text("Cancelling…")
    expect(cancel).to_be_disabled()
    wait_for_status(page, "succeeded")
    expect(outcome).to_have_text("The report finished before the cancel took effect.")


@pytest.mark.parametrize(
    ("scenario", "reason", "partial"),
    [
        ("error", "The provider dropped the connection", True),
        ("truncated", "The stream ended early", True),
        ("empty", "without writing any text", False),
        ("stall", "The provider stalled", False),
        ("invalid", "did not have the shape of a report", True),
    ],
)
def test_each_failure_says_why_and_keeps_its_text(
    open_page, fast_server, sample_file, scenario, reason, partial
):
    page = open_page(fast_server)
    upload(page, sample_file, scenario=scenario)
    wait_for_status(page, "failed")
    incomplete = page.locator("[data-incomplete]")
    expect(incomplete).to_be_visible()
    expect(incomplete).to_contain_text(reason)
    if scenario == "invalid":
        # The text is all there: not "incomplete"; the technical reason waits behind a toggle.
        expect(incomplete).to_contain_text("arrived whole")
        expect(incomplete).not_to_contain_text("incomplete")
        expect(incomplete.locator("details")).not_to_have_attribute("open", "")
        expect(incomplete.locator("details")).to_contain_text("level-1 heading")
    else:
        expect(incomplete).to_contain_text("incomplete" if partial else "No text arrived.")
    expect(page.locator("[data-report-rendered]")).to_be_hidden()
    expect(page.locator("a[data-download]")).to_have_count(0)
    expect(page.locator(".badge-succeeded")).to_have_count(0)
    stream = page.locator("[data-report-stream]")
    if partial:
        expect(stream).to_be_visible()
        expect(stream).not_to_be_empty()
    else:
        expect(stream).to_be_hidden()


def test_an_unreadable_file_says_why_first_and_offers_another_file_not_a_retry(
    open_page, fast_server, tmp_path
):
    scan = tmp_path / "scan.pdf"
    scan.write_bytes(samples.image_pdf())
    page = open_page(fast_server)
    upload(page, scan)
    wait_for_status(page, "failed")
    incomplete = page.locator("[data-incomplete]")
    expect(incomplete.locator(".incomplete-reason")).to_contain_text("no text layer")
    expect(incomplete.locator("[data-action=upload-another]")).to_be_visible()
    expect(page.locator("[data-action=retry]")).to_be_hidden()
    incomplete.locator("[data-action=upload-another]").click()
    expect(page.locator("input[name=files]")).to_be_visible()


def test_a_retry_says_why_it_waits_without_staff_words(open_page, fast_server, sample_file):
    page = open_page(fast_server)
    task_id = upload(page, sample_file, scenario="rate_limited")
    status = page.locator("#task-status")
    expect(status).to_contain_text("trying again: the provider asked us to wait 2 s")
    expect(status).not_to_contain_text("attempt")
    expect(page.locator(".task-head")).not_to_contain_text("lane")
    expect(page.locator(".task-head")).not_to_contain_text("scenario")
    wait_for_status(page, "succeeded")
    assert len(task_json(page, task_id)["attempts"]) == 2


def test_another_users_task_is_not_found_and_its_socket_refused(
    open_page, fast_server, sample_file, problems
):
    problems.allow("WebSocket connection to")
    alice = open_page(fast_server, "alice")
    task_id = upload(alice, sample_file)

    bob = open_page(fast_server, "bob")
    response = bob.request.get(f"/tasks/{task_id}/")
    assert response.status == 404
    assert "data-live" not in response.text()
    bob.goto("/")
    outcome = bob.evaluate(
        """url => new Promise(resolve => {
            const socket = new WebSocket(url);
            const seen = {opened: false, messages: 0};
            socket.onopen = () => { seen.opened = true; };
            socket.onmessage = () => { seen.messages += 1; };
            socket.onclose = event => resolve({...seen, code: event.code});
        })""",
        fast_server.url.replace("http", "ws") + f"/ws/tasks/{task_id}/?after=0",
    )
    assert outcome == {"opened": False, "messages": 0, "code": 1006}
