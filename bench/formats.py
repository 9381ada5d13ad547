"""Benchmark: the report's download formats, for the largest report a task may save.

    python -m bench.formats [--kb 200] [--runs 3]

A report of about --kb KB of Markdown (the report cap; the simulated model's report of the
sample article, its sections repeated, with a Sources section) is converted to each format
as the result view converts it (`reports.exports.convert`: in the sandbox's child process,
a child a conversion), from a thread of the bounded pool, while the
event loop on the main thread runs a 10 ms ticker. Measured: each conversion's time (median
of --runs), the child's peak memory, and the loop's lag (how late each tick wakes), during
the conversions and, as the baseline, for as long with nothing else running. Then the PDF
once more, laid out in a thread of this process instead of a child: what the sandbox spares
the loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only")
os.environ["REPORTS_DATA_DIR"] = tempfile.mkdtemp(prefix="reportline-bench-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django

django.setup()

from bench.harness import SAMPLE, Results, lengthen, percentile  # noqa: E402
from reports import exports, threads  # noqa: E402
from reports.exports import html, pdf  # noqa: E402
from reports.providers.base import SourceDocument  # noqa: E402
from reports.providers.report_writer import write_report  # noqa: E402
from reports.validation import validate_report  # noqa: E402

TICK_S = 0.010
LAG_TARGET_MS = 5.0  # "unchanged": the loop's P99 lag at most this much above idle


def largest_report(kb: int) -> str:
    """Return a valid report of just under `kb` KB, sources included."""
    sources = "\n## Sources\n\n" + "".join(
        f"- S{n} — article.md, Street trees and the urban heat island, part {n}\n"
        for n in range(1, 41)
    )
    report = write_report([SourceDocument("article.md", SAMPLE.read_text())], "")
    body = lengthen(report, kb * 1024 - len(sources.encode()) - 4096)
    text = body.rstrip("\n") + "\n" + sources
    assert validate_report(text, max_kb=kb) == [], validate_report(text, max_kb=kb)
    return text


class Ticker:
    """How late the loop wakes a 10 ms sleep, tick after tick, until stopped."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.running = True

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while self.running:
            asked = loop.time()
            await asyncio.sleep(TICK_S)
            self.lags.append(loop.time() - asked - TICK_S)

    def figures(self) -> dict:
        return {
            "p50_ms": percentile(self.lags, 50) * 1000,
            "p99_ms": percentile(self.lags, 99) * 1000,
            "max_ms": max(self.lags) * 1000,
            "ticks": len(self.lags),
        }


async def idle(seconds: float) -> dict:
    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    await asyncio.sleep(seconds)
    ticker.running = False
    await ticking
    return ticker.figures()


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(convert, *args) -> tuple[float, int, float]:
    """Return the call's time, the size of what it made and its children's CPU time."""
    started, cpu = time.perf_counter(), children_cpu_s()
    out = convert(*args)
    return time.perf_counter() - started, len(out), children_cpu_s() - cpu


async def converting(calls: list) -> tuple[dict, list[tuple[float, int]]]:
    """Run `calls` one after another off the loop; return the loop's lag and their times."""
    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    results = [await threads.in_blocking_pool(timed)(*call) for call in calls]
    ticker.running = False
    await ticking
    return ticker.figures(), results


def child_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


async def measure(report: str, runs: int, results: Results) -> None:
    started = time.perf_counter()
    calls = [(exports.convert, report, fmt) for fmt in ("html", "docx", "pdf") for _ in range(runs)]
    during, times = await converting(calls)
    spent = time.perf_counter() - started
    baseline = await idle(min(spent, 60))
    results.data.update(
        {"report_bytes": len(report.encode()), "idle_lag": baseline, "lag_converting": during}
    )
    for index, fmt in enumerate(("html", "docx", "pdf")):
        mine = times[index * runs : (index + 1) * runs]
        seconds = statistics.median(t for t, _, _ in mine)
        results.add(f"{fmt}: conversion, median of {runs}", seconds * 1000, "ms")
        results.add(
            f"{fmt}: the child's CPU time, median",
            statistics.median(c for *_, c in mine) * 1000,
            "ms",
        )
        results.add(f"{fmt}: file size", mine[0][1] / 1024, "KB")
        results.data[f"{fmt}_seconds"] = [t for t, *_ in mine]
    results.add("PDF/Word child: peak resident memory", child_peak_mb(), "MB")
    for name in ("p50_ms", "p99_ms", "max_ms"):
        row = results.add(
            f"loop lag {name[:-3].upper()}, converting (in the sandbox)",
            during[name],
            "ms",
            baseline=baseline[name],
        )
        if name == "p99_ms":
            row.target = f"<= idle + {LAG_TARGET_MS:g} ms"
            row.met = during[name] <= baseline[name] + LAG_TARGET_MS
    in_thread, [(seconds, *_)] = await converting(
        [(lambda text: pdf.render(html.standalone(text)), report)]
    )
    results.add("pdf in a thread of this process instead: conversion", seconds * 1000, "ms")
    results.add(
        "loop lag P99, PDF in a thread of this process",
        in_thread["p99_ms"],
        "ms",
        baseline=baseline["p99_ms"],
    )
    results.add("loop lag max, PDF in a thread of this process", in_thread["max_ms"], "ms")
    results.data["lag_pdf_in_thread"] = in_thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kb", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    threads.shorten_switch_interval()  # as the servers run
    results = Results("formats")
    asyncio.run(measure(largest_report(args.kb), args.runs, results))
    results.show()
    print(f"saved {results.save()}")


if __name__ == "__main__":
    main()
