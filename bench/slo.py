"""The release gate: the headline benchmarks with their baselines, judged against targets.

    python -m bench.slo [--only fanout,first_text,replay,idle] [--quick]

Run it alone on the machine, before a release; it takes a few minutes. It prints one
table (measure, baseline, figure, target, verdict), the load average before and after,
the CPU and the git commit, and saves them to bench/results/slo.json. Each target is
judged against the baseline measured in the same run.

Exit status: 0 every target met; 1 a target missed; 2 the gate refused to judge (the
machine was not quiet at the start, or a baseline fell outside its sane range, so the
figures beside it say nothing about the build). `--quick` runs tiny sizes as a smoke
check of the gate itself: it judges nothing, says so, saves nothing and exits 0 once
every benchmark has run. A benchmark that raises is a miss (exit 1, in both modes).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from bench.harness import ROOT, Layout, Results, machine, percentile

# Refuse to judge when, at the start, the 1-minute load average is above this share of
# the cores, or another process used more than this share of a core over a second.
LOAD_PER_CORE = 0.5
BUSY_SHARE = 0.2


@dataclass(frozen=True)
class Target:
    """The largest (or, with `at_least`, smallest) figure allowed, given the baseline."""

    text: str
    allowed: Callable[[float | None], float]
    at_least: bool = False
    relative: bool = False  # judged against the baseline: none, no verdict

    def met(self, figure: float, baseline: float | None) -> bool:
        limit = self.allowed(baseline)
        return figure >= limit if self.at_least else figure <= limit


def at_most(limit: float, unit: str = "") -> Target:
    return Target(f"<= {limit:g}{unit}", lambda _: limit)


def at_least(limit: float, unit: str = "") -> Target:
    return Target(f">= {limit:g}{unit}", lambda _: limit, at_least=True)


def baseline_plus(margin: float, unit: str = "") -> Target:
    return Target(f"<= baseline + {margin:g}{unit}", lambda base: base + margin, relative=True)


def baseline_times(factor: float) -> Target:
    return Target(f"<= {factor:g}x baseline", lambda base: base * factor, relative=True)


@dataclass
class Check:
    """One measure of the gate: its figure, its baseline from the same run, its target."""

    measure: str
    figure: float | None
    target: Target
    unit: str = ""
    baseline: float | None = None
    sane: tuple[float, float] | None = None  # where the baseline must fall to be trusted
    verdict: str = ""
    why: str = ""

    def judge(self) -> str:
        if self.figure is None:
            self.verdict, self.why = "not judged", "no figure"
        elif self.target.relative and self.baseline is None:
            self.verdict, self.why = "not judged", "no baseline"
        elif self.sane and not (
            self.baseline is not None and self.sane[0] <= self.baseline <= self.sane[1]
        ):
            low, high = self.sane
            self.verdict = "not judged"
            self.why = f"baseline {_fmt(self.baseline)} outside its sane {low:g} to {high:g}"
        else:
            self.verdict = "met" if self.target.met(self.figure, self.baseline) else "MISSED"
        return self.verdict


@dataclass
class Sizes:
    """How big each benchmark runs: the gate's own sizes, or tiny ones for --quick."""

    streams: tuple[int, ...] = (100, 200)  # S, then 2S
    first_text_runs: int = 20
    replay: dict = field(
        default_factory=lambda: {"streams": 10, "reloads": 40, "chars": 16_000, "seed": 1}
    )
    idle: dict = field(default_factory=lambda: {"tasks": 20, "connections": 200, "idle_s": 10.0})


QUICK = Sizes(
    streams=(4, 8),
    first_text_runs=2,
    replay={"streams": 2, "reloads": 3, "chars": 2_000, "seed": 1},
    idle={"tasks": 3, "connections": 10, "idle_s": 1.0},
)

# The fan-out's P99 lag target by layout, at S and at 2S streams; the runner's write share.
LAG_P99_MS = {"embedded": (250, 300), "scale-out": (400, 400)}
WRITE_SHARE_PCT = 15
# The bare push at the openai profile coalesces every ~100 ms: its P99 is ~102 ms alone.
BARE_LAG_P99_SANE_MS = (50, 150)


def fanout(sizes: Sizes) -> Iterable[Check]:
    """Benchmarks 2 and 4: S streams through the app and through the bare push, uvicorn
    (the production web server), embedded and scale-out with 1 web + 1 worker process."""
    from bench.fanout import run_app, run_bare

    for name in ("embedded", "scale-out"):
        for level, streams in enumerate(sizes.streams):
            layout = Layout.embedded() if name == "embedded" else Layout.scale_out()
            label = f"{name} S={streams}"
            print(f"-- fan-out, {label}", flush=True)
            app = run_app(layout, streams=streams, server="uvicorn")
            bare = run_bare(layout, streams=streams, server="uvicorn")
            yield Check(
                f"fan-out {label}: lag P99 (baseline: bare push)",
                app["lag_p99_ms"],
                at_most(LAG_P99_MS[name][level], " ms"),
                "ms",
                bare["lag_p99_ms"],
                BARE_LAG_P99_SANE_MS,
            )
            faults = app["streams"] - app["finished"] + app["text_wrong"]
            faults += app["gaps"] + app["duplicates"] + app["reordered"]
            yield Check(f"fan-out {label}: streams lost, gaps, repeats", faults, at_most(0))
            if level:
                continue  # at 2x the streams only the lag and losslessness are targets
            yield Check(
                f"fan-out {label}: runner's wait on its chunk writes, P50",
                None if app["write_share_p50"] is None else app["write_share_p50"] * 100,
                at_most(WRITE_SHARE_PCT, " %"),
                "%",
            )
            yield Check(
                f"fan-out {label}: provider deltas per commit",
                app["provider_deltas_per_report"] / app["commits_per_report"],
                at_least(10, "x"),
                "x",
            )
            if name == "embedded":
                yield Check(
                    f"fan-out {label}: 'database is locked'", app["locked_errors"], at_most(0)
                )


def first_text(sizes: Sizes) -> Iterable[Check]:
    """Benchmark 1: click → first text - TTFT in Chromium, against a bare page."""
    from bench import first_text as bench

    print("-- first text", flush=True)
    measured = bench.run(sizes.first_text_runs)
    samples, updates = measured["samples_ms"], measured["updates_first_100ms"]
    for p, margin in ((50, 30), (95, 80)):
        yield Check(
            f"click → first text - TTFT, P{p} (baseline: bare page)",
            percentile(samples["app"], p),
            baseline_plus(margin, " ms"),
            "ms",
            percentile(samples["bare"], p),
            (0, 50),
        )
    yield Check(
        "visible updates in the first 100 ms of text, P50",
        percentile(updates["app"], 50),
        at_least(5),
        baseline=percentile(updates["bare"], 50),
    )


def replay(sizes: Sizes) -> Iterable[Check]:
    """Benchmark 5: reloads of live task pages, against a static page of the same text."""
    from bench import replay as bench

    print("-- replay", flush=True)
    measured = bench.run(**sizes.replay)
    yield Check(
        "reload → replayed text painted, P50 (baseline: static page)",
        percentile(measured["replay_ms"], 50),
        baseline_times(1.5),
        "ms",
        percentile(measured["static_ms"], 50),
        (1, 150),
    )
    yield Check(
        "replayed text → first live text, P95",
        percentile(measured["resume_ms"], 95),
        at_most(200, " ms"),
        "ms",
    )
    faults = len(measured["wrong"]) + measured["prefix_errors"]
    yield Check("pages not showing the report exactly, gaps or repeats", faults, at_most(0))


def idle(sizes: Sizes) -> Iterable[Check]:
    """Benchmark 6: pickup, idle CPU and memory per idle WebSocket, both layouts."""
    from bench import idle as bench

    size = sizes.idle
    for name in ("embedded", "scale-out"):
        layout = Layout.embedded() if name == "embedded" else Layout.scale_out()
        print(f"-- idle, {name}", flush=True)
        waits = bench.pickup(layout, size["tasks"])
        figures = bench.idle(layout, size["connections"], size["idle_s"])
        per_bare = bench.bare_memory(layout, size["connections"])
        yield Check(
            f"{name}: submit → claimed, P95", percentile(waits, 95), at_most(50, " ms"), "ms"
        )
        yield Check(
            f"{name}: idle CPU, no connection",
            figures["cpu_no_connections"] * 100,
            at_most(2, " %"),
            "%",
        )
        yield Check(
            f"{name}: idle CPU, {size['connections']} idle WebSockets",
            figures["cpu_connected"] * 100,
            at_most(2, " %"),
            "%",
        )
        yield Check(
            f"{name}: memory per idle WebSocket (baseline: bare server)",
            figures["kb_per_connection"],
            at_most(32, " KB"),
            "KB",
            per_bare,
            (1, 30),
        )


SUITES = {"fanout": fanout, "first_text": first_text, "replay": replay, "idle": idle}


def busy_processes(seconds: float = 1.0) -> list[tuple[str, float]]:
    """Other processes that used more than BUSY_SHARE of a core over `seconds`."""
    before = _cpu_ticks()
    time.sleep(seconds)
    after = _cpu_ticks()
    tick = os.sysconf("SC_CLK_TCK")
    busy = []
    for pid, (name, ticks) in after.items():
        share = (ticks - before.get(pid, (name, ticks))[1]) / tick / seconds
        if pid != os.getpid() and share > BUSY_SHARE:
            busy.append((f"{name} ({pid})", share))
    return busy


def _cpu_ticks() -> dict[int, tuple[str, int]]:
    ticks = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                text = stat.read()
        except OSError:  # the process ended meanwhile
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        ticks[int(entry.name)] = (name, int(fields[11]) + int(fields[12]))  # utime + stime
    return ticks


def unquiet(load1: float, cores: int, busy: list[tuple[str, float]]) -> list[str]:
    """Why the machine is not quiet enough to judge timings on (empty: it is)."""
    reasons = []
    if load1 > LOAD_PER_CORE * cores:
        reasons.append(f"1-minute load average {load1:.2f} > {LOAD_PER_CORE * cores:g}")
    reasons += [f"{name} used {share:.0%} of a core" for name, share in busy]
    return reasons


def exit_status(checks: list[Check], refused: list[str]) -> int:
    if refused or any(check.verdict == "not judged" for check in checks):
        return 2
    return 1 if any(check.verdict == "MISSED" for check in checks) else 0


def gate(suites: list[Callable[[Sizes], Iterable[Check]]], *, quick: bool, quiet) -> int:
    """Run the suites and judge them; print the table; return the exit status.

    `quiet()` returns why the machine is not quiet (empty when it is)."""
    before = machine()
    refused = [] if quick else quiet()
    checks: list[Check] = []
    failed = []
    for suite in [] if refused else suites:
        try:
            checks += suite(QUICK if quick else Sizes())
        except Exception as error:  # a benchmark that breaks is a miss; the others still run
            traceback.print_exc()
            failed.append(
                Check(f"{suite.__name__}: ran to the end", 1, at_most(0), why=repr(error))
            )
    for check in checks:
        if quick:
            check.verdict, check.why = "not judged", "--quick"
        else:
            check.judge()
    for check in failed:
        check.verdict = "MISSED"
    checks += failed
    status = int(bool(failed)) if quick else exit_status(checks, refused)
    show(checks, before, machine(), refused, quick, status)
    if checks and not quick:  # a refusal at the start keeps the last judged run's file
        save(checks, before, status)
    return status


def show(checks, before, after, refused, quick, status) -> None:
    print(f"\n== release gate ==  commit {commit()}, {before['cpu']}, {before['cpus']} CPUs")
    print(f"load average before {before['load_average']}, after {after['load_average']}")
    print(f"{'measure':62s} {'baseline':>10s} {'figure':>10s}  {'target':24s} verdict")
    for check in checks:
        why = f" ({check.why})" if check.why else ""
        print(
            f"{check.measure:62s} {_fmt(check.baseline, check.unit):>10s} "
            f"{_fmt(check.figure, check.unit):>10s}  {check.target.text:24s} {check.verdict}{why}"
        )
    if quick:
        print("--quick: tiny sizes, a smoke check of the gate; nothing is judged")
    elif refused:
        print("not judged: the machine is not quiet: " + "; ".join(refused))
    meaning = {0: "every target met", 1: "a target MISSED", 2: "not judged"}[status]
    meaning = ("the benchmarks ran", "a benchmark broke")[status] if quick else meaning
    print(f"exit {status}: {meaning}")


def save(checks, before, status) -> None:
    results = Results("slo")
    for check in checks:
        results.add(
            check.measure,
            check.figure,
            check.unit,
            baseline=check.baseline,
            target=check.target.text,
            met={"met": True, "MISSED": False}.get(check.verdict),
        )
    results.data = {
        "commit": commit(),
        "load_average_before": before["load_average"],
        "verdicts": {check.measure: check.verdict for check in checks},
        "why": {c.measure: c.why for c in checks if c.why},
        "exit": status,
    }
    print(f"saved {results.save()}")


def commit() -> str:
    result = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True
    )
    return result.stdout.strip() or "unknown"


def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:,.1f}{' ' + unit if unit else ''}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help=f"comma-separated, of {', '.join(SUITES)}")
    parser.add_argument("--quick", action="store_true", help="tiny sizes; judges nothing")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(SUITES)
    unknown = [name for name in names if name not in SUITES]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(SUITES)}")

    def quiet() -> list[str]:
        return unquiet(os.getloadavg()[0], os.cpu_count() or 1, busy_processes())

    return gate([SUITES[name] for name in names], quick=args.quick, quiet=quiet)


if __name__ == "__main__":
    sys.exit(main())
