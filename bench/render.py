"""Benchmark 3: what the page costs the browser while a long report streams in.

    python -m bench.render [--chars 50000]

A report of about 50,000 characters at the stress profile (~4 characters every
4-5 ms) streams into (a) the task page (text batched per animation frame, Markdown
rendered once at the end), (b) the floor: a bare page that appends each delta's raw
text, (c) the naive page: re-renders the whole text as Markdown on every delta.
Measured in headless Chromium: main-thread script time (CDP Performance.getMetrics
ScriptDuration), long tasks (PerformanceObserver "longtask"), DOM writes per second
(MutationObserver callbacks on the streamed element).
"""

from __future__ import annotations

import argparse

from bench.browser import ask_for_a_fresh_report, chromium, logged_in
from bench.harness import SAMPLE, Layout, Results, serve

LONG_TASKS = """
window.__long = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.__long.push(entry.duration);
}).observe({type: "longtask", buffered: true});
"""


def metrics(cdp) -> dict:
    return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}


def cost(page, cdp, start, done_js: str, timeout_s: float) -> dict:
    """Run `start`, wait for `done_js`; return script time, long tasks, DOM writes."""
    before = metrics(cdp)
    start()
    page.wait_for_function(done_js, timeout=timeout_s * 1000, polling=500)
    after = metrics(cdp)
    marks = page.evaluate("window.__marks")
    long_tasks = page.evaluate("window.__long")
    span_s = (marks[-1] - marks[0]) / 1000 if len(marks) > 1 else None
    return {
        "script_ms": (after["ScriptDuration"] - before["ScriptDuration"]) * 1000,
        "task_ms": (after["TaskDuration"] - before["TaskDuration"]) * 1000,
        "long_tasks": len([d for d in long_tasks if d > 50]),
        "longest_task_ms": max(long_tasks, default=0),
        "dom_writes": len(marks),
        "dom_writes_per_s": len(marks) / span_s if span_s else None,
        "chars": page.evaluate("document.querySelector('[data-report-stream]').textContent.length"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chars", type=int, default=50_000)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()

    layout = Layout.embedded()
    env = layout.environ(
        REPORTS_SIMULATED_PROFILE="stress",
        REPORTS_MAX_REPORT_KB=1000,
        REPORTS_MAX_OUTPUT_TOKENS=100_000,
    )
    user = layout.django("prepare", env=env)
    app = serve(layout, env, extra=("--static", "--report-chars", str(args.chars)))
    bare = serve(layout, layout.environ(), extra=("--bare",))
    figures = {}
    try:
        app.wait_ready()
        bare.wait_ready(path="/page/")
        with chromium() as browser:
            context = logged_in(browser, app.url, user["cookie"])
            context.add_init_script(LONG_TASKS)
            page = context.new_page()
            cdp = context.new_cdp_session(page)
            cdp.send("Performance.enable")

            page.goto(f"{app.url}/")
            page.set_input_files("input[type=file][name=files]", str(SAMPLE))
            ask_for_a_fresh_report(page)

            def submit():
                page.click("[data-upload-submit]")
                page.wait_for_url("**/tasks/*/")

            done = "document.querySelector('[data-task-status]').dataset.taskStatus == 'succeeded'"
            figures["app"] = cost(page, cdp, submit, done, args.timeout)
            query = f"profile=stress&per_token=1&raw=1&chars={args.chars}"
            for name, extra in (("floor", ""), ("naive", "&page=naive")):
                page.goto(f"{bare.url}/page/?{query}{extra}")
                start = lambda: page.click("[data-start]")  # noqa: E731
                figures[name] = cost(page, cdp, start, "window.__done === true", args.timeout)
    finally:
        app.stop()
        bare.stop()

    results = Results("render")
    results.data = figures
    app_, floor, naive = figures["app"], figures["floor"], figures["naive"]
    results.add("report streamed (characters, task page)", app_["chars"])
    results.add(
        "main-thread script time, task page vs raw append() floor",
        app_["script_ms"],
        "ms",
        baseline=floor["script_ms"],
        target="<= 2x floor",
        met=app_["script_ms"] <= 2 * floor["script_ms"],
    )
    results.add(
        "main-thread script time, naive page vs task page",
        naive["script_ms"],
        "ms",
        baseline=app_["script_ms"],
        target=">= 10x",
        met=naive["script_ms"] >= 10 * app_["script_ms"],
    )
    results.add(
        "main-thread busy time (all tasks), task page",
        app_["task_ms"],
        "ms",
        baseline=floor["task_ms"],
    )
    results.add(
        "main-thread busy time (all tasks), naive page",
        naive["task_ms"],
        "ms",
        baseline=app_["task_ms"],
    )
    for name in ("app", "floor", "naive"):
        f = figures[name]
        results.add(
            f"long tasks over 50 ms, {name}",
            f["long_tasks"],
            target="0" if name == "app" else "",
            met=(f["long_tasks"] == 0) if name == "app" else None,
        )
        results.add(f"longest task, {name}", f["longest_task_ms"], "ms")
        results.add(
            f"DOM writes per second, {name}",
            f["dom_writes_per_s"],
            target="<= 60" if name == "app" else "",
            met=(f["dom_writes_per_s"] or 0) <= 60 if name == "app" else None,
        )
    results.show()
    print(f"saved {results.save()}")


if __name__ == "__main__":
    main()
