"""Streaming under stress: a long report at a high token rate, and a server restart."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.browser.helpers import stream_text, task_json, upload
from tests.browser.server import LiveServer
from tests.helpers import report_body

pytestmark = pytest.mark.browser

# Counts, beside the page's own counters: animation frames, and DOM mutations of the
# streamed text with the frame each happened in.
PROBE = """
window.__probe = {frames: 0, mutations: 0, firstFrame: null, lastFrame: null};
(function frame() {
  requestAnimationFrame(() => { window.__probe.frames += 1; frame(); });
})();
document.addEventListener("DOMContentLoaded", () => {
  const stream = document.querySelector("[data-report-stream]");
  if (!stream) return;
  new MutationObserver(records => {
    const probe = window.__probe;
    probe.mutations += records.length;
    if (probe.firstFrame === null) probe.firstFrame = probe.frames;
    probe.lastFrame = probe.frames;
  }).observe(stream, {characterData: true, childList: true, subtree: true});
});
"""


def counters(page) -> dict:
    return page.evaluate("({...window.__probe, ...window.reportline.stats})")


def until(page, predicate, timeout_s: float = 15.0) -> dict:
    """Poll the page's counters until `predicate` holds (the page's clock may be paused)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = counters(page)
        if predicate(seen):
            return seen
        assert time.monotonic() < deadline, f"gave up waiting; last seen {seen}"
        time.sleep(0.05)


def test_a_long_report_is_written_once_per_frame_not_once_per_token(
    open_page, long_server, sample_file
):
    page = open_page(long_server)
    page.add_init_script(PROBE)
    page.clock.install()  # timers and animation frames run on a clock the test can stop
    task_id = upload(page, sample_file)
    until(page, lambda c: c["textWrites"] >= 5)

    # Freeze the frames: text keeps arriving, and none of it is written...
    page.clock.pause_at(page.evaluate("Date.now()") + 1)
    frozen = counters(page)
    burst = until(page, lambda c: c["deltas"] >= frozen["deltas"] + 20)
    assert burst["textWrites"] == frozen["textWrites"]
    assert burst["mutations"] == frozen["mutations"]
    # ...until one frame writes all of it, once.
    page.clock.run_for(20)
    after = until(page, lambda c: c["flushes"] > burst["flushes"])
    # One write per frame (20 ms may hold a second frame, with text that came meanwhile).
    frames = after["flushes"] - burst["flushes"]
    assert 1 <= after["textWrites"] - burst["textWrites"] <= frames < 20
    page.clock.resume()

    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=60_000
    )
    text = stream_text(page)
    assert len(text) >= 50_000
    assert task_json(page, task_id)["text_length"] == len(text)
    end = counters(page)
    frames_while_streaming = end["lastFrame"] - end["firstFrame"] + 1
    assert end["mutations"] == end["textWrites"]  # each write is one DOM mutation
    assert end["textWrites"] <= frames_while_streaming + 1
    assert end["textWrites"] <= end["deltas"]
    tokens = len(text) / 4
    assert end["textWrites"] * 20 < tokens, end


@pytest.fixture
def restartable_server(data_root, database_template) -> Iterator[LiveServer]:
    """A server of its own, to kill: a short lease, so the lost attempt is re-run soon."""
    server = LiveServer(
        data_root / "restart",
        database_from=database_template,
        REPORTS_SIMULATED_TTFT_S=0.2,
        REPORTS_SIMULATED_TOKENS_PER_S=40,
        REPORTS_LEASE_S=2,
        REPORTS_POLL_S=0.2,
    ).start()
    yield server
    server.stop()


def elapsed_s(words: str) -> int:
    """Seconds in "submitted 42 s ago" or "submitted 1 min 05 s ago"."""
    numbers = [int(n) for n in re.findall(r"\d+", words)]
    return numbers[0] * 60 + numbers[1] if "min" in words else numbers[0]


def test_a_server_restart_mid_stream_reconnects_and_shows_the_new_attempt(
    open_page, restartable_server, sample_file, problems
):
    # While the server is down: refused sockets (htmx logs each error event as it
    # comes), and whatever request was in flight when it died.
    problems.allow("WebSocket connection to", "[object Event]", "Failed to load resource")
    page = open_page(restartable_server)
    submitted = time.monotonic()
    task_id = upload(page, sample_file)
    page.wait_for_function(
        "() => document.querySelector('[data-report-stream]').textContent.length >= 20"
    )

    restartable_server.stop(crash=True)
    connection = page.locator("[data-connection]")
    expect(connection).to_be_visible()
    expect(connection).to_contain_text("Connection lost — reconnecting in")
    expect(connection).to_have_attribute("data-connection", "reconnecting")
    interrupted = stream_text(page)

    restartable_server.start()
    # The lost attempt's lease runs out, attempt 2 starts, and the page replaces its
    # text, keeping attempt 1's as its own, marked interrupted.
    earlier = page.locator("details[data-attempt='1']")
    expect(earlier).to_have_count(1, timeout=30_000)
    expect(earlier.locator("summary")).to_have_text("Earlier try — interrupted")
    # It says plainly why the text starts again, and the time since submit goes on.
    expect(page.locator("#task-status")).to_contain_text(
        "the server restarted; the report is being written again from the start"
    )
    shown = page.locator("[data-elapsed]").text_content()
    assert elapsed_s(shown) >= time.monotonic() - submitted - 3, shown
    # Still signed in after the restart: live again, never "signed-out".
    expect(connection).to_be_hidden()
    expect(connection).to_have_attribute("data-connection", "live")
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=30_000
    )

    with page.expect_download() as info:
        page.click("a[data-download]")
    report = info.value.path().read_text()
    assert stream_text(page).rstrip() == report_body(report)
    first_attempt = earlier.locator(".report-text").evaluate("e => e.textContent")
    assert first_attempt.startswith(interrupted)
    assert report.startswith(first_attempt)  # the same document, the same report
    assert len(task_json(page, task_id)["attempts"]) == 2

    page.reload()  # and the same again as served
    expect(page.locator("details[data-attempt='1']")).to_have_count(1)
    assert stream_text(page).rstrip() == report_body(report)
