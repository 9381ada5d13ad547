"""The page never lies about its connection: [data-connection] is `live`, `reconnecting`,
`lost` or `signed-out`, and each is what is really happening (docs/pages.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.browser.accessibility import violations
from tests.browser.helpers import TASK_URL, stream_text, upload
from tests.browser.proxy import Proxy
from tests.helpers import report_body

pytestmark = pytest.mark.browser


@pytest.fixture
def proxy(slow_server) -> Iterator[Proxy]:
    """A proxy in front of the slow server. Tests name it before `open_page`, so it is
    closed after their pages are: a page still open when its proxy goes would log a
    refused reconnect."""
    proxy = Proxy(int(slow_server.url.rsplit(":", 1)[1]))
    yield proxy
    proxy.close()


# Counts the sockets the page opens, whichever way it opens them.
COUNT_SOCKETS = """
window.__sockets = 0;
window.WebSocket = class extends WebSocket {
  constructor(...args) { super(...args); window.__sockets += 1; }
};
"""


def open_through(page, proxy: Proxy, task_id: str) -> None:
    """Open the task page through the proxy (the session cookie is the same host's)."""
    page.goto(f"{proxy.url}/tasks/{task_id}/")
    expect(page.locator("[data-connection]")).to_have_attribute("data-connection", "live")


def test_a_page_whose_session_ended_says_so_and_stops_trying(
    proxy, open_page, slow_server, sample_file, problems
):
    problems.allow("WebSocket connection to", "401 (Unauthorized)", "[object Event]")
    page = open_page(slow_server)
    page.add_init_script(COUNT_SOCKETS)
    page.clock.install()  # the page's timers run on a clock the test can move on
    task_id = upload(page, sample_file, scenario="slow")
    open_through(page, proxy, task_id)

    page.context.clear_cookies()  # the session ended (logged out elsewhere, expired)
    handshakes = proxy.connections
    proxy.drop()  # and the socket went with it

    connection = page.locator("[data-connection]")
    expect(connection).to_have_attribute("data-connection", "signed-out")
    expect(connection).to_contain_text("You were signed out")
    login = connection.locator("a[data-login]")
    expect(login).to_be_visible()
    assert login.get_attribute("href") == f"/accounts/login/?next=/tasks/{task_id}/"
    # Once refused, it stops: no further handshakes (the one fetch of the session check
    # is the other connection counted), however long the page stays open: ten minutes
    # of the page's time, past every wait between tries, run at once.
    sockets = page.evaluate("window.__sockets")
    page.clock.run_for(600_000)
    assert page.evaluate("window.__sockets") == sockets
    assert proxy.connections - handshakes <= 2
    expect(connection).to_have_attribute("data-connection", "signed-out")

    login.click()  # logging in again returns to the task
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "alice-demo-pass")
    page.click("button[type=submit]")
    page.wait_for_url(TASK_URL)
    assert TASK_URL.search(page.url)[1] == task_id


def test_a_cut_network_shows_reconnecting_then_live_again(
    proxy, open_page, slow_server, sample_file, problems
):
    problems.allow("WebSocket connection to", "[object Event]")
    page = open_page(slow_server)
    page.add_init_script(COUNT_SOCKETS)
    page.clock.install()  # the page's timers run on a clock the test can move on
    task_id = upload(page, sample_file, scenario="slow")
    open_through(page, proxy, task_id)
    connection = page.locator("[data-connection]")
    heartbeat_ms = int(page.locator("[data-live]").get_attribute("data-heartbeat-ms"))
    # Text comes every tenth of a second from now on: the socket's silence starts at the freeze.
    page.wait_for_function(
        "() => document.querySelector('[data-report-stream]').textContent.length > 0"
    )

    proxy.freeze()  # nothing closes: the socket just carries nothing any more
    sockets = page.evaluate("window.__sockets")
    # Two heartbeats missed is not yet a dead connection...
    page.clock.run_for(2 * heartbeat_ms)
    expect(connection).to_have_attribute("data-connection", "live")
    assert page.evaluate("window.__sockets") == sockets
    # ...but a silence of three is: the socket is replaced, without waiting for a close.
    page.clock.run_for(heartbeat_ms)
    expect(connection).to_have_attribute("data-connection", "reconnecting")
    expect(connection).to_be_visible()
    assert page.evaluate("window.__sockets") == sockets + 1

    proxy.thaw()
    expect(connection).to_have_attribute("data-connection", "live", timeout=30_000)
    expect(connection).to_be_hidden()
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=60_000
    )


def test_a_browser_gone_offline_says_so_at_once_and_catches_up_when_back(
    open_page, slow_server, sample_file, problems
):
    problems.allow("WebSocket connection to", "ERR_INTERNET_DISCONNECTED")
    page = open_page(slow_server)
    page.add_init_script(COUNT_SOCKETS)
    page.clock.install()  # the page's timers run on a clock the test can move on
    upload(page, sample_file, scenario="slow")
    connection = page.locator("[data-connection]")
    expect(connection).to_have_attribute("data-connection", "live")
    page.wait_for_function(
        "() => document.querySelector('[data-report-stream]').textContent.length > 0"
    )
    sockets = page.evaluate("window.__sockets")

    # The phone lost its network. Its socket may stay open and silent for 25 s: the page
    # believes the browser, within a second, rather than say "live" meanwhile.
    page.context.set_offline(True)
    page.clock.run_for(1000)
    expect(connection).to_have_attribute("data-connection", "reconnecting")
    expect(connection).to_contain_text("You are offline")
    page.clock.run_for(120_000)  # no try is spent without a network: never `lost`
    expect(connection).to_have_attribute("data-connection", "reconnecting")
    assert page.evaluate("window.__sockets") == sockets

    # Back: at once, not at the next scheduled try; nothing missed, nothing twice.
    page.context.set_offline(False)
    page.clock.run_for(1000)
    assert page.evaluate("window.__sockets") == sockets + 1
    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=60_000
    )
    followed = stream_text(page)
    page.reload()
    assert stream_text(page) == followed


# Short waits before the first tries, then one of minutes: once the page says `lost`, no
# try of its own comes before the test is over, so only "Try now" can bring it back.
QUICK_THEN_MINUTES = "window.reportlineReconnectMs = [100, 100, 100, 100, 600000];"


def test_a_server_away_for_several_tries_is_lost_until_try_now_brings_it_back(
    proxy, open_page, slow_server, sample_file, problems
):
    problems.allow("WebSocket connection to", "[object Event]", "Failed to load resource")
    page = open_page(slow_server)
    page.add_init_script(QUICK_THEN_MINUTES)
    task_id = upload(page, sample_file, scenario="slow")
    open_through(page, proxy, task_id)
    page.wait_for_function(
        "() => document.querySelector('[data-report-stream]').textContent.length >= 20"
    )
    connection = page.locator("[data-connection]")
    try_now = connection.locator("[data-action=reconnect]")
    expect(try_now).to_be_hidden()

    proxy.refuse()  # the server is unreachable: every try is refused
    expect(connection).to_have_attribute("data-connection", "reconnecting")
    expect(try_now).to_be_hidden()  # one failed try is not yet lost
    expect(connection).to_have_attribute("data-connection", "lost", timeout=30_000)
    expect(connection).to_contain_text("Connection lost — still trying")
    # This server writes the report itself: while it is away, nothing goes on.
    expect(connection).to_contain_text("If the server is down, the report goes on once it is back.")
    expect(try_now).to_be_visible()
    assert violations(page) == []  # the offer is as reachable as the rest of the page
    before = stream_text(page)

    proxy.listen()  # the server is back; the page's next try of its own is minutes away
    try_now.click()
    expect(connection).to_have_attribute("data-connection", "live")
    expect(connection).to_be_hidden()

    expect(page.locator("[data-task-status]")).to_have_attribute(
        "data-task-status", "succeeded", timeout=90_000
    )
    with page.expect_download() as info:
        page.click("a[data-download]")
    report = info.value.path().read_text()
    text = stream_text(page)
    assert text.rstrip() == report_body(report)  # no gap, no repeat across the outage
    assert len(before) < len(text)  # and text went on arriving after it
    assert page.locator("details[data-attempt]").count() == 0
