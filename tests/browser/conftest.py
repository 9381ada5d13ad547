"""Browser fixtures: the real server in a subprocess, headless Chromium, logged-in pages.

Servers are started once per session and shared; each differs only in how fast the
simulated provider writes, so mid-stream tests have time to act and others do not wait.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from tests.browser.helpers import serve
from tests.browser.server import CHROMIUM, CHROMIUM_ARGS, USERS, LiveServer
from tests.helpers import SAMPLE

expect.set_options(timeout=15_000)


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if Path(item.fspath).is_relative_to(here):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not installed at /usr/bin/chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="session")
def data_root() -> Iterator[Path]:
    """Where the servers keep their databases: out of pytest's tmp dirs, which other
    pytest sessions on the machine prune while this one may still be running."""
    root = Path(tempfile.mkdtemp(prefix="reportline-browser-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def database_template(data_root) -> Path:
    """A data directory with a migrated database and the demo users, to copy from."""
    return LiveServer(data_root / "template").prepare().data_dir


@pytest.fixture(scope="session")
def fast_server(data_root, database_template) -> Iterator[LiveServer]:
    """Reports in well under a second; a stall is declared after 2 s."""
    yield from serve(
        data_root,
        database_template,
        "fast",
        REPORTS_SIMULATED_TTFT_S=0.1,
        REPORTS_SIMULATED_TOKENS_PER_S=600,
        REPORTS_STALL_TIMEOUT_S=2,
        REPORTS_POLL_S=0.2,
    )


@pytest.fixture(scope="session")
def slow_server(data_root, database_template) -> Iterator[LiveServer]:
    """About 50 tokens a second: the sample report takes some 5 s, time to act mid-stream."""
    yield from serve(
        data_root,
        database_template,
        "slow",
        REPORTS_SIMULATED_TTFT_S=0.3,
        REPORTS_SIMULATED_TOKENS_PER_S=50,
        REPORTS_POLL_S=0.2,
        # As behind deploy/nginx.conf (tests/browser/test_nginx.py): the proxy's word on TLS.
        DJANGO_TLS_PROXY=1,
    )


@pytest.fixture(scope="session")
def long_server(data_root, database_template) -> Iterator[LiveServer]:
    """A report of 60,000 characters at 8,000 tokens a second (tests/browser/long_provider)."""
    yield from serve(
        data_root,
        database_template,
        "long",
        settings="tests.browser.settings",
        REPORTS_PROVIDER="long",
        TEST_LONG_REPORT_CHARS=60_000,
        TEST_LONG_REPORT_TOKENS_PER_S=8_000,
        TEST_LONG_REPORT_TTFT_S=1.0,
        REPORTS_POLL_S=0.2,
    )


@pytest.fixture(scope="session")
def sample_file(data_root) -> Path:
    path = data_root / "harbours.md"
    path.write_text(SAMPLE)
    return path


@pytest.fixture(scope="session")
def _sessions() -> dict:
    return {}


class Problems:
    """Console errors and uncaught page errors (a CSP refusal is one); none are expected."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.allowed: list[str] = []

    def watch(self, page: Page) -> Page:
        page.on("pageerror", lambda error: self.messages.append(f"page error: {error}"))
        page.on("console", self._console)
        return page

    def _console(self, message) -> None:
        if message.type == "error":
            self.messages.append(f"console: {message.text}")

    def allow(self, *fragments: str) -> None:
        """Expect console errors containing these fragments (a test provoked them)."""
        self.allowed.extend(fragments)

    def unexpected(self) -> list[str]:
        return [m for m in self.messages if not any(a in m for a in self.allowed)]


@pytest.fixture
def problems() -> Problems:
    return Problems()


@pytest.fixture
def open_page(browser, _sessions, problems) -> Iterator[Callable[..., Page]]:
    """Return open_page(server, user="alice"): a new logged-in page in its own context."""
    contexts: list[BrowserContext] = []
    logs_from: dict[Path, int] = {}  # each server's log, from where this test began

    def open_page(server: LiveServer, user: str = "alice") -> Page:
        logs_from.setdefault(server.log_path, len(server.log()))
        key = (server.url, user)
        context = browser.new_context(
            base_url=server.url, storage_state=_sessions.get(key), accept_downloads=True
        )
        contexts.append(context)
        page = problems.watch(context.new_page())
        if key not in _sessions:
            page.goto("/accounts/login/")
            page.fill("input[name=username]", user)
            page.fill("input[name=password]", USERS[user])
            page.click("button[type=submit]")
            expect(page.locator("form[data-upload]")).to_be_visible()
            _sessions[key] = context.storage_state()
        return page

    yield open_page
    for context in contexts:
        context.close()
    unexpected = problems.unexpected()
    # A server error in the console: its traceback is in the server's log.
    logs = [path.read_text()[start:] for path, start in logs_from.items() if path.exists()]
    assert unexpected == [], "\n".join(logs)
