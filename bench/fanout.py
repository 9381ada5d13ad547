"""Benchmark 2 (with 4 and 7): fan-out capacity of the full path, with its baselines.

    python -m bench.fanout [--streams 100] [--layouts embedded,scale-out]
                           [--servers daphne,uvicorn] [--double] [--skip-per-token]
    python -m bench.fanout --web 1,2 --workers 1,2 [--streams 100] [--servers uvicorn]

For each layout (embedded: SQLite, in-memory layer, the worker inside the server;
scale-out: PostgreSQL, Redis, a separate `reportworker`) and server, S clients each
submit a report at the OpenAI-like profile and follow it over the WebSocket. Measured:
lag from the provider's (scheduled) emit to the client's receipt of each delta (P50,
P99), delivered deltas, gaps, duplicates, reordering, text equal to what was stored,
"database is locked" errors, events (= transactions) per report against provider deltas,
and the share of a stream's time spent writing and publishing chunks. Baselines in the
same run: the app with one message per token, and a bare ASGI app pushing the same
frames on the same server.

With --web and --workers it runs the capacity model's step instead (docs/capacity.md):
scale-out only, the same S on each count of web processes (behind nginx) and workers,
with what each stream costs (bench/meter.py); the results file records both counts.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import time
from collections import Counter

from bench import analysis
from bench.harness import (
    PYTHON,
    ROOT,
    SAMPLE,
    Layout,
    Results,
    balance,
    percentile,
    serve,
    work,
)
from bench.meter import COST_KEYS, Meter
from bench.wsclient import SUBMITTERS

PROFILE, SEED = "openai", 0
# P99 lag at 100 streams: the embedded server shares one process; scale-out adds a hop.
LAG_P99_TARGET_MS = {"embedded": 250, "scale-out": 400}


def run_app(
    layout: Layout,
    *,
    streams: int,
    server: str = "daphne",
    per_token: bool = False,
    reconnects: int = 0,
    timeout_s: float = 180,
    profile: str = PROFILE,
    web: int = 0,
    workers: int = 1,
    submitters: int = SUBMITTERS,
) -> dict:
    """Run S streams through the whole app; return the figures and correctness.

    With web = N (scale-out), N web processes serve behind nginx (deploy/nginx.conf) and
    `workers` worker processes share the streams; without, the clients reach one web
    process directly."""
    probe = layout.data_dir / f"probe-{time.monotonic_ns()}.txt"
    env = layout.environ(
        BENCH_PROBE=probe,
        REPORTS_SIMULATED_PROFILE=profile,
        REPORTS_SIMULATED_SEED=SEED,
        REPORTS_MAX_RUNNING=streams,
        REPORTS_LANE_LIMITS=f"short={streams},long=1",
        REPORTS_EMBEDDED_SLOTS=streams,
        REPORTS_QUEUE_LIMIT=streams * 4,
        REPORTS_EMBEDDED_WORKER="1" if layout.name == "embedded" else "0",
    )
    user = layout.django("prepare", env=env)
    extra = ("--per-token",) if per_token else ()
    servers = [serve(layout, env, server=server, extra=extra) for _ in range(max(web, 1))]
    worker_processes = []
    if layout.name == "scale-out":
        slots = math.ceil(streams / workers)
        worker_processes = [
            work(layout, env, slots=slots, extra=extra, index=i) for i in range(workers)
        ]
    proxy = [balance(layout, servers, streams)] if web else []
    processes = servers + worker_processes + proxy
    meter = Meter(
        servers,
        worker_processes,
        proxy,
        database_url=env["DATABASE_URL"] if layout.name == "scale-out" else "",
        redis_url=env["REDIS_URL"] if layout.name == "scale-out" else "",
    )
    try:
        for process in servers + proxy:
            process.wait_ready()
        meter.start()
        config = {
            "base_url": (proxy or servers)[0].url,
            "mode": "app",
            "streams": streams,
            "document": str(SAMPLE),
            "timeout_s": timeout_s,
            "reconnects": reconnects,
            "seed": SEED,
            "submitters": submitters,
            **user,
        }
        clients = run_clients(config)
        meter.stop()
        rss_kb = sum(p.rss_kb() for p in processes)
    finally:
        for process in processes:
            process.stop()
    meter.stopped()
    wall = meter.after["at"] - meter.before["at"]
    cpu_each = [
        after - before
        for role in ("web", "worker", "proxy")
        for before, after in zip(meter.before["cpu"][role], meter.after["cpu"][role], strict=True)
    ]
    logs = "".join(p.log() for p in processes)
    stored = layout.django("collect", *[c["key"] for c in clients if c["key"]], env=env)
    starts, flushes, writes = analysis.read_probe(probe)
    figures = summarize_app(
        clients, stored, starts, flushes, profile=profile, measure_lag=not reconnects
    )
    figures.update(
        web=len(servers),
        workers=len(worker_processes),
        nginx=bool(proxy),
        server=server,
        cpu_share=sum(cpu_each) / wall / 2,  # of the machine's two cores
        cpu_share_each=[c / wall / 2 for c in cpu_each],  # servers, workers, then nginx
        wall_s=wall,
        rss_mb=rss_kb / 1024,
        db_write_share=sum(seconds for _, _, seconds in writes) / wall,
        # Chunk writes are shared by the streams; each report adds its claim, its move
        # to finalizing and its end.
        commits_per_report=len(writes) / streams + 3,
        chunks_per_write=sum(n for n, _, _ in writes) / len(writes) if writes else None,
        locked_errors=logs.count("database is locked"),
        server_errors=logs.count("Traceback"),
        **meter.figures(streams, figures["report_s"]),
    )
    return figures


def run_bare(layout: Layout, *, streams: int, server: str, per_token: bool = False) -> dict:
    probe = layout.data_dir / f"probe-bare-{time.monotonic_ns()}.txt"
    env = layout.environ(BENCH_PROBE=probe)
    process = serve(layout, env, server=server, extra=("--bare",))
    try:
        process.wait_ready(path="/page/")
        query = f"profile={PROFILE}&seed={SEED}&per_token={int(per_token)}"
        clients = run_clients(
            {"base_url": process.url, "mode": "bare", "streams": streams, "query": query}
        )
    finally:
        process.stop()
    from bench.bare import TEXT  # the text the bare app streamed

    starts, _, _ = analysis.read_probe(probe)
    all_lags, checks = [], []
    for client in clients:
        seqs = sorted({seq for _, seq, _ in analysis.received(client)})
        count = max(seqs, default=0)
        checks.append(analysis.correctness(client, TEXT, list(range(1, count + 1))))
        t0 = starts.get((client["key"], 1))
        if t0 is not None:
            key = f"{client['key']}:1"
            all_lags += analysis.lags(client, TEXT, t0, PROFILE, SEED, key)
    return {**lag_figures(all_lags), **totals(checks)}


def run_clients(config: dict) -> list[dict]:
    result = subprocess.run(
        [str(PYTHON), "-m", "bench.wsclient"],
        input=json.dumps(config),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=config.get("timeout_s", 300) + 120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"the clients failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout)


def summarize_app(clients, stored, starts, flushes, *, profile: str, measure_lag: bool) -> dict:
    all_lags, checks, events, deltas_in, shares, durations = [], [], [], [], [], []
    for client in clients:
        row = stored.get(client["key"])
        if row is None:
            checks.append(
                {
                    "delivered": 0,
                    "gaps": 0,
                    "duplicates": 0,
                    "reordered": 0,
                    "text_ok": False,
                    "finished": False,
                }
            )
            continue
        delta_seqs = [seq for seq, kind, _ in row["events"] if kind == "delta"]
        checks.append(analysis.correctness(client, row["text"], delta_seqs))
        attempt = row["attempts"]
        t0 = starts.get((client["key"], attempt))
        if t0 is None or not row["text"]:
            continue
        key = f"{client['key']}:{attempt}"
        schedule_len = len(
            analysis.pacing.plan(
                analysis.pacing.profile_named(profile), row["text"], seed=SEED, key=key
            ).chunks
        )
        deltas_in.append(schedule_len)
        events.append(len(row["events"]))
        if measure_lag:
            all_lags += analysis.lags(client, row["text"], t0, profile, SEED, key)
        spans = flushes.get(client["key"], [])  # the runner's wait: write and publish
        if spans:
            stream_s = spans[-1][0] + spans[-1][1] - t0
            durations.append(stream_s)
            shares.append(sum(s for _, s in spans) / stream_s)
    return {
        **lag_figures(all_lags),
        **totals(checks),
        # Why a stream did not finish, as its client saw it: an error, or a close that
        # was not the normal one.
        "client_errors": dict(Counter(c["error"][:120] for c in clients if c["error"])),
        "close_codes": dict(Counter(str(code) for c in clients for code in c["close_codes"])),
        "provider_deltas_per_report": _mean(deltas_in),
        "events_per_report": _mean(events),
        "write_share_p50": percentile(shares, 50),
        "write_share_max": max(shares, default=None),
        "report_s": _mean(durations),  # from the provider's start to the last chunk written
    }


def lag_figures(lags: list[float]) -> dict:
    return {
        "lag_p50_ms": _ms(percentile(lags, 50)),
        "lag_p99_ms": _ms(percentile(lags, 99)),
        "lag_max_ms": _ms(max(lags, default=None)),
        "lag_samples": len(lags),
    }


def totals(checks: list[dict]) -> dict:
    return {
        "streams": len(checks),
        "finished": sum(c["finished"] for c in checks),
        "delivered": sum(c["delivered"] for c in checks),
        "gaps": sum(c["gaps"] for c in checks),
        "duplicates": sum(c["duplicates"] for c in checks),
        "reordered": sum(c["reordered"] for c in checks),
        "text_wrong": sum(not c["text_ok"] for c in checks),
    }


def add_lossless(results: Results, label: str, figures: dict) -> None:
    """Add the row saying whether every stream finished with exactly its text."""
    results.add(
        f"{label} lossless (finished/gaps/dups/reorder)",
        figures["finished"],
        f"/{figures['streams']}",
        target="all, 0/0/0",
        met=lossless(figures),
    )


def lossless(figures: dict) -> bool:
    return (
        figures["finished"] == figures["streams"]
        and figures["gaps"] == figures["duplicates"] == figures["reordered"] == 0
        and figures["text_wrong"] == 0
    )


def _ms(seconds):
    return None if seconds is None else round(seconds * 1000, 1)


def _mean(values):
    return sum(values) / len(values) if values else None


def run_steps(
    streams: int,
    servers: list[str],
    steps: list[tuple[int, int]],
    name: str,
    submitters: int = SUBMITTERS,
):
    """The capacity model's measured step: the same S streams on each (web, workers) count
    of processes, scale-out behind nginx; figures and per-stream costs of each, against the
    first step."""
    results = Results(name)
    results.data["steps"] = [{"web": web, "workers": workers} for web, workers in steps]
    for server in servers:
        first = None
        for web, workers in steps:
            label = f"scale-out/{server}/{web}web+{workers}workers"
            print(f"-- {label} behind nginx: {streams} streams", flush=True)
            app = run_app(
                Layout.scale_out(),
                streams=streams,
                server=server,
                web=web,
                workers=workers,
                submitters=submitters,
            )
            first = first or app
            against = first if app is not first else {}  # the first step is the baseline
            results.data[f"{label}/app/{streams}"] = app
            print(json.dumps(app), flush=True)
            results.add(
                f"{label} S={streams} lag P99",
                app["lag_p99_ms"],
                "ms",
                baseline=against.get("lag_p99_ms"),
            )
            add_lossless(results, f"{label} S={streams}", app)
            results.add(
                f"{label} S={streams} CPU share of 2 cores",
                app["cpu_share"] * 100,
                "%",
                baseline=against.get("cpu_share", 0) * 100 or None,
            )
            for key in COST_KEYS:
                results.add(f"{label} {key}", app.get(key))
            results.save()  # after each step: a late failure loses nothing
    results.show()
    print(f"saved {results.save()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--layouts", default="embedded,scale-out")
    parser.add_argument("--servers", default="daphne")
    parser.add_argument("--double", action="store_true", help="also run 2x the streams")
    parser.add_argument("--skip-per-token", action="store_true")
    parser.add_argument("--name", default="fanout", help="of the results file")
    parser.add_argument(
        "--web",
        default="",
        help="scale-out steps instead: web processes behind nginx in each step, e.g. 1,2",
    )
    parser.add_argument("--workers", default="", help="worker processes in each step, e.g. 1,2")
    parser.add_argument(
        "--submitters",
        type=int,
        default=SUBMITTERS,
        help="uploads sent at once in the steps (more: more streams open at once)",
    )
    args = parser.parse_args()
    if args.web:
        webs = [int(n) for n in args.web.split(",")]
        workers = [int(n) for n in (args.workers or args.web).split(",")]
        run_steps(
            args.streams,
            args.servers.split(","),
            list(zip(webs, workers, strict=True)),
            args.name,
            args.submitters,
        )
        return

    results = Results(args.name)
    s = args.streams
    for layout_name in args.layouts.split(","):
        for server in args.servers.split(","):
            layout = Layout.embedded() if layout_name == "embedded" else Layout.scale_out()
            label = f"{layout_name}/{server}"
            print(f"-- {label}: {s} streams", flush=True)
            app = run_app(layout, streams=s, server=server)
            bare = run_bare(layout, streams=s, server=server)
            results.data[f"{label}/app/{s}"] = app
            results.data[f"{label}/bare/{s}"] = bare
            print(json.dumps({"app": app, "bare": bare}), flush=True)
            results.add(
                f"{label} S={s} lag P50", app["lag_p50_ms"], "ms", baseline=bare["lag_p50_ms"]
            )
            results.add(
                f"{label} S={s} lag P99",
                app["lag_p99_ms"],
                "ms",
                baseline=bare["lag_p99_ms"],
                target=f"<= {LAG_P99_TARGET_MS[layout_name]} ms",
                met=app["lag_p99_ms"] is not None
                and app["lag_p99_ms"] <= LAG_P99_TARGET_MS[layout_name],
            )
            add_lossless(results, f"{label} S={s}", app)
            results.add(
                f"{label} S={s} CPU share of 2 cores", app["cpu_share"] * 100, "%", baseline=None
            )
            if layout_name == "embedded":
                results.add(
                    f"{label} S={s} 'database is locked'",
                    app["locked_errors"],
                    target="0",
                    met=app["locked_errors"] == 0,
                )
            results.add(
                f"{label} S={s} provider deltas per report / chunk events",
                app["provider_deltas_per_report"] / app["events_per_report"],
                "x",
            )
            results.add(
                f"{label} S={s} provider deltas per report / commits per report",
                app["provider_deltas_per_report"] / app["commits_per_report"],
                "x",
                target=">= 10x",
                met=app["provider_deltas_per_report"] >= 10 * app["commits_per_report"],
            )
            results.add(
                f"{label} S={s} event-table write time, share of wall time",
                app["db_write_share"] * 100,
                "%",
                target="<= 15%",
                met=app["db_write_share"] <= 0.15,
            )
            results.add(
                f"{label} S={s} runner's wait on its chunk writes, share of stream",
                (app["write_share_p50"] or 0) * 100,
                "%",
            )
            if not args.skip_per_token:
                per_token = run_app(layout, streams=s, server=server, per_token=True, timeout_s=60)
                results.data[f"{label}/per-token/{s}"] = per_token
                print(json.dumps({"per_token": per_token}), flush=True)
                results.add(
                    f"{label} S={s} per-token baseline lag P99",
                    per_token["lag_p99_ms"],
                    "ms",
                    baseline=app["lag_p99_ms"],
                )
                results.add(
                    f"{label} S={s} per-token baseline CPU share",
                    per_token["cpu_share"] * 100,
                    "%",
                    baseline=app["cpu_share"] * 100,
                )
            if args.double:
                double = run_app(layout, streams=2 * s, server=server)
                results.data[f"{label}/app/{2 * s}"] = double
                print(json.dumps({"double": double}), flush=True)
                results.add(f"{label} S={2 * s} lag P99", double["lag_p99_ms"], "ms")
                results.add(
                    f"{label} S={2 * s} lossless",
                    double["finished"],
                    f"/{2 * s}",
                    target="nothing lost/duplicated/reordered",
                    met=lossless(double),
                )
            results.save()  # after each layout and server: a late failure loses nothing
    results.show()
    print(f"saved {results.save()}")


if __name__ == "__main__":
    main()
