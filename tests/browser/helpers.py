"""Helpers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import Page

from bench.browser import ask_for_a_fresh_report
from tests.browser.server import LiveServer

TASK_URL = re.compile(r"/tasks/([0-9a-f-]{36})/$")


def serve(data_root: Path, template: Path, name: str, **env) -> Iterator[LiveServer]:
    server = LiveServer(data_root / name, database_from=template, **env).start()
    try:
        yield server
    finally:
        server.stop()


def upload(
    page: Page, path: Path, *, scenario: str = "ok", instructions: str = "", fresh: bool = True
) -> str:
    """Submit the upload form on the home page; return the task's id (a new task's unless
    `fresh` is off and the same documents made a report earlier)."""
    page.goto("/")
    if fresh:
        ask_for_a_fresh_report(page)
    page.set_input_files("input[name=files]", str(path))
    if instructions:
        page.fill("textarea[name=instructions]", instructions)
    page.select_option("select[name=scenario]", scenario)
    page.click("[data-upload-submit]")
    page.wait_for_url(TASK_URL)
    return TASK_URL.search(page.url)[1]


def stream_text(page: Page) -> str:
    return page.locator("[data-report-stream]").evaluate("element => element.textContent")


def task_json(page: Page, task_id: str) -> dict:
    response = page.request.get(f"/api/tasks/{task_id}")
    assert response.ok, response.text()
    return response.json()
