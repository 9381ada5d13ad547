"""Benchmark 5: refresh at random points of live streams, in headless Chromium.

    python -m bench.replay [--streams 10] [--reloads 100]

S task pages follow live reports (OpenAI-like profile, ~16,000 characters, a minute
long); the benchmark reloads one of them at a random moment, `--reloads` times. Per
reload: time from navigation to the replayed text on screen (first contentful paint,
waited for, each page brought to the front first; the page arrives holding the text)
against a static page holding the same number of characters (same browser, same server,
uvicorn as in production); time from then to the first live text
appended; and, at the end, that every page's text is exactly the stored report (no gap,
no passage twice), and that what a page showed before each reload was a prefix of it.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import time

from bench.browser import chromium, logged_in
from bench.harness import SAMPLE, Layout, Results, percentile, serve
from bench.wsclient import submit

PAINTED = "performance.getEntriesByName('first-contentful-paint').length > 0"
PAINT = """(() => {
  const paint = performance.getEntriesByName("first-contentful-paint")[0];
  const nav = performance.getEntriesByType("navigation")[0];
  return paint ? paint.startTime : nav.domContentLoadedEventEnd;
})()"""
SERVER = "uvicorn"  # the production web server (docs/production.md)


def painted_at(page) -> float:
    """Return when the page's text was first painted (ms from navigation): its first
    contentful paint, waited for (a page that has not painted yet has no entry; read
    early, it would be timed by its DOM alone), or DOMContentLoaded if none comes."""
    with contextlib.suppress(Exception):  # no paint within 2 s: time the page by its DOM
        page.wait_for_function(PAINTED, timeout=2000, polling=10)
    return page.evaluate(PAINT)


TEXT = "document.querySelector('[data-report-stream]').textContent"
STATUS = "document.querySelector('[data-task-status]').dataset.taskStatus"


def run(streams: int = 10, reloads: int = 100, chars: int = 16_000, seed: int = 1) -> dict:
    """Reload live task pages at random; return the timings and what the pages showed."""
    rng = random.Random(seed)
    layout = Layout.embedded()
    env = layout.environ(
        REPORTS_SIMULATED_PROFILE="openai",
        REPORTS_MAX_RUNNING=streams,
        REPORTS_LANE_LIMITS=f"short={streams},long=1",
        REPORTS_EMBEDDED_SLOTS=streams,
    )
    user = layout.django("prepare", env=env)
    app = serve(layout, env, server=SERVER, extra=("--static", "--report-chars", str(chars)))
    bare = serve(layout, layout.environ(), server=SERVER, extra=("--bare",))
    replay, static, resume, prefix_errors, shown = [], [], [], 0, {}
    try:
        app.wait_ready()
        bare.wait_ready(path="/page/")
        with chromium() as browser:
            context = logged_in(browser, app.url, user["cookie"])
            pages = {}
            for _ in range(streams):
                task_id = submit(app.url, user["token"], str(SAMPLE))
                page = context.new_page()
                page.goto(f"{app.url}/tasks/{task_id}/")
                pages[task_id] = page
            static_page = context.new_page()
            time.sleep(1.0)  # let every stream begin
            for _ in range(reloads):
                task_id = rng.choice(list(pages))
                page = pages[task_id]
                time.sleep(rng.uniform(0.05, 0.4))
                if page.evaluate(
                    "document.querySelector('[data-task-status]').dataset.taskStatus"
                ) in ("succeeded", "failed"):
                    continue
                page.bring_to_front()
                before = page.evaluate(TEXT)
                shown.setdefault(task_id, []).append(before)
                page.reload(wait_until="domcontentloaded")
                painted = painted_at(page)
                length = len(page.evaluate(TEXT))
                try:
                    page.wait_for_function("window.__marks.length > 0", timeout=5000, polling=10)
                    resume.append(
                        page.evaluate("window.__marks[0] - performance.timeOrigin") - painted
                    )
                except Exception:  # the stream ended before any new text: no resume to time
                    pass
                replay.append(painted)
                static_page.bring_to_front()  # a page in the background is not painted
                static_page.goto(f"{bare.url}/text/?chars={length}", wait_until="domcontentloaded")
                static.append(painted_at(static_page))
            for page in pages.values():
                page.wait_for_function(f"{STATUS} == 'succeeded'", timeout=300_000, polling=500)
            final = {}
            for task_id, page in pages.items():
                page.bring_to_front()  # a page in the background gets no animation frames
                page.wait_for_timeout(100)
                final[task_id] = page.evaluate(TEXT)
    finally:
        app.stop()
        bare.stop()
    stored = layout.django("collect", *final, env=env)
    wrong = [t for t in final if final[t] != stored[t]["text"]]
    for task_id in wrong:
        text, report = final[task_id], stored[task_id]["text"]
        at = next((i for i, (a, b) in enumerate(zip(text, report, strict=False)) if a != b), None)
        print(f"{task_id}: shown {len(text)} chars, stored {len(report)}, first difference {at}")
    for task_id, texts in shown.items():
        prefix_errors += sum(not stored[task_id]["text"].startswith(t) for t in texts)

    return {
        "replay_ms": replay,
        "static_ms": static,
        "resume_ms": resume,
        "wrong": wrong,
        "prefix_errors": prefix_errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--reloads", type=int, default=100)
    parser.add_argument("--chars", type=int, default=16_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    measured = run(args.streams, args.reloads, args.chars, args.seed)
    replay, static, resume = measured["replay_ms"], measured["static_ms"], measured["resume_ms"]
    wrong, prefix_errors = measured["wrong"], measured["prefix_errors"]

    results = Results("replay")
    results.data = {"replay_ms": replay, "static_ms": static, "resume_ms": resume}
    r95, s95 = percentile(replay, 95), percentile(static, 95)
    results.add("reloads measured", len(replay))
    results.add(
        "reload → replayed text painted, P50",
        percentile(replay, 50),
        "ms",
        baseline=percentile(static, 50),
        target="<= 1.5x static",
        met=percentile(replay, 50) <= 1.5 * percentile(static, 50),
    )
    results.add(
        "reload → replayed text painted, P95",
        r95,
        "ms",
        baseline=s95,
        target="<= 1.5x static",
        met=r95 <= 1.5 * s95,
    )
    results.add("replayed text → first live text, P50", percentile(resume, 50), "ms")
    results.add(
        "replayed text → first live text, P95",
        percentile(resume, 95),
        "ms",
        target="<= 200 ms",
        met=percentile(resume, 95) <= 200,
    )
    results.add(
        "pages whose final text differs from the report", len(wrong), target="0", met=not wrong
    )
    results.add(
        "texts shown before a reload that were not a prefix",
        prefix_errors,
        target="0",
        met=prefix_errors == 0,
    )
    results.show()
    print(f"saved {results.save()}")


if __name__ == "__main__":
    main()
