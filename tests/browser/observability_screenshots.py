"""Take the README's observability screenshots from the real pages.

Run by `scripts/screenshots` after the product screenshots. Starts the server on a
throwaway SQLite database, runs real tasks through the embedded worker (normal ones, a
slow one, a failure, a retry after a 429, a stall cut off by its time limit), then
writes latency.png (the staff latency page), waterfall.png (the admin waterfall of the
retried task) and compare.png (a normal, a slow and a failed task side by side).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from playwright.sync_api import Page

from tests.browser.screenshots import alice_page, optimise, status_is, submit
from tests.browser.server import ROOT

VIEWPORT = {"width": 1280, "height": 900}
TERMINAL = {"succeeded", "failed", "cancelled", "reconciliation_required"}


def task_id(page: Page) -> str:
    return page.url.rstrip("/").rsplit("/", 1)[-1]


def wait_until_ended(page: Page, ids: list[str], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        statuses = [page.request.get(f"/api/tasks/{i}").json()["status"] for i in ids]
        if all(s in TERMINAL for s in statuses):
            return
        page.wait_for_timeout(500)
    raise TimeoutError(f"tasks still running: {statuses}")


def take(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with alice_page(
        "reportline-latency-screens-",
        VIEWPORT,
        REPORTS_SIMULATED_TTFT_S=0.4,
        REPORTS_SIMULATED_TOKENS_PER_S=120,
        REPORTS_STALL_TIMEOUT_S=4,
    ) as (page, _server):
        # The slow one runs while the others go through, one after another, each
        # watched on its page so the browser's first text is measured too.
        submit(page, scenario="slow")
        slow = task_id(page)
        ids = {"slow": slow}
        for name, scenario in (
            ("normal", "ok"),
            ("retried", "rate_limited"),
            ("failed", "error"),
            ("stalled", "stall"),
            ("ok2", "ok"),
            ("ok3", "ok"),
            ("ok4", "ok"),
        ):
            # Each its own instructions, so no task is answered by an earlier report.
            submit(page, scenario=scenario, instructions=f"Report {name}.")
            ids[name] = task_id(page)
            status_is(page, "succeeded" if scenario in {"ok", "rate_limited"} else "failed")
        wait_until_ended(page, list(ids.values()))

        page.goto("/staff/latency/?window=1h")
        page.screenshot(path=out / "latency.png", full_page=True)

        page.goto(f"/admin/reports/task/{ids['retried']}/change/")
        page.locator("[data-waterfall]").scroll_into_view_if_needed()
        page.locator("fieldset", has=page.locator("[data-waterfall]")).screenshot(
            path=out / "waterfall.png"
        )

        trio = "&".join(f"task={ids[n]}" for n in ("normal", "slow", "failed"))
        page.goto(f"/admin/reports/task/compare/?{trio}")
        page.screenshot(path=out / "compare.png", full_page=True)
    shots = [out / f"{name}.png" for name in ("latency", "waterfall", "compare")]
    optimise(shots)
    for shot in shots:
        print(shot)


if __name__ == "__main__":
    take(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "screenshots")
