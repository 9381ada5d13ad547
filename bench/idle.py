"""Benchmark 6: queue pickup when a slot is free, idle CPU, memory per idle WebSocket.

    python -m bench.idle [--tasks 30] [--connections 200] [--idle-s 30]

Pickup: tasks submitted one at a time (a slot always free); `queue_ms` (submit →
claimed, both instants on the database's clock), embedded and scale-out. Baseline: a
worker that only polled every REPORTS_POLL_S would pick up after half of it on average.
Idle: the server (and the scale-out worker) with N WebSockets open on queued tasks,
CPU from /proc over `--idle-s` seconds, against the same processes with no connection;
memory per idle connection from the server's RSS, against a bare ASGI server holding
the same number of idle connections. The first WARM_UP connections of a process pay its
one-time costs (templates compiled, modules imported, the channel layer's connection):
they are opened first and reported apart, and the memory per connection is the RSS
growth over the other N - WARM_UP, the cost of one more page (the bare server's alike).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

from bench.harness import PYTHON, ROOT, SAMPLE, Layout, Results, percentile, serve, work
from bench.wsclient import submit

SERVER = "uvicorn"  # the production web server (docs/production.md)
WARM_UP = 20  # connections whose memory is a process's one-time cost, not a page's


def pickup(layout: Layout, tasks: int) -> list[float]:
    # Reports that take a moment, and slots to spare: every task meets a free slot.
    env = layout.environ(
        REPORTS_EMBEDDED_WORKER="1" if layout.name == "embedded" else "0",
        REPORTS_SIMULATED_TTFT_S=0.05,
        REPORTS_SIMULATED_TOKENS_PER_S=20_000,
        REPORTS_MAX_RUNNING=8,
        REPORTS_LANE_LIMITS="short=8,long=1",
    )
    user = layout.django("prepare", env=env)
    processes = [serve(layout, env, server=SERVER)]
    if layout.name == "scale-out":
        processes.append(work(layout, env, slots=4))
    try:
        processes[0].wait_ready()
        time.sleep(1.0)  # the worker is listening
        ids = []
        for _ in range(tasks):
            ids.append(submit(processes[0].url, user["token"], str(SAMPLE)))
            time.sleep(0.3)
        time.sleep(1.0)
    finally:
        for process in processes:
            process.stop()
    stored = layout.django("collect", *ids, env=env)
    return [row["queue_ms"] for row in stored.values() if row["queue_ms"] is not None]


def hold(url: str, urls: list[str], cookie: str, connections: int, hold_s: float):
    config = {
        "mode": "hold",
        "base_url": url,
        "urls": urls,
        "cookie": cookie,
        "connections": connections,
        "hold_s": hold_s,
    }
    process = subprocess.Popen(
        [str(PYTHON), "-m", "bench.wsclient"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    process.stdin.write(json.dumps(config))
    process.stdin.close()
    if process.stdout.readline().strip() != "ready":
        raise RuntimeError("the idle clients did not connect")
    return process


def cpu_over(processes, seconds: float) -> float:
    """Return the share of the machine's 2 cores the processes used over `seconds`."""
    before = sum(p.cpu_s() for p in processes)
    time.sleep(seconds)
    return (sum(p.cpu_s() for p in processes) - before) / seconds / 2


def idle(layout: Layout, connections: int, idle_s: float) -> dict:
    # No lane has a slot: the tasks stay queued and their pages stay connected and idle.
    env = layout.environ(
        REPORTS_EMBEDDED_WORKER="1" if layout.name == "embedded" else "0",
        REPORTS_LANE_LIMITS="short=0,long=0",
        REPORTS_QUEUE_LIMIT=1000,
    )
    user = layout.django("prepare", env=env)
    processes = [serve(layout, env, server=SERVER)]
    if layout.name == "scale-out":
        processes.append(work(layout, env, slots=4))
    try:
        server = processes[0].wait_ready()
        ids = [submit(server.url, user["token"], str(SAMPLE)) for _ in range(20)]
        time.sleep(2.0)
        cpu_none = cpu_over(processes, idle_s)
        ws = server.url.replace("http", "ws", 1)
        urls = [f"{ws}/ws/tasks/{task_id}/" for task_id in ids]
        memory, clients = held_memory(server, urls, user["cookie"], connections, idle_s + 30)
        cpu_connected = cpu_over(processes, idle_s)
        for client in clients:
            client.terminate()
    finally:
        for process in processes:
            process.stop()
    return {"cpu_no_connections": cpu_none, "cpu_connected": cpu_connected, **memory}


def held_memory(server, urls: list[str], cookie: str, connections: int, hold_s: float):
    """Open `connections` idle WebSockets to `server`, WARM_UP of them first; return the
    server's RSS growth for those first ones (KB, all told) and for each later one (KB),
    and the client processes, still connected."""
    first = min(WARM_UP, connections // 2)
    start = server.rss_kb()
    warm = hold(server.url, urls, cookie, first, hold_s)
    time.sleep(2.0)
    before = server.rss_kb()
    rest = hold(server.url, urls, cookie, connections - first, hold_s)
    time.sleep(2.0)
    after = server.rss_kb()
    figures = {
        "first_connections_kb": before - start,
        "kb_per_connection": (after - before) / (connections - first),
    }
    return figures, (warm, rest)


def bare_memory(layout: Layout, connections: int) -> float:
    server = serve(layout, layout.environ(), server=SERVER, extra=("--bare",))
    try:
        server.wait_ready(path="/page/")
        ws = server.url.replace("http", "ws", 1)
        memory, clients = held_memory(server, [f"{ws}/ws/idle/x/"], "", connections, 30)
        for client in clients:
            client.terminate()
    finally:
        server.stop()
    return memory["kb_per_connection"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--idle-s", type=float, default=30)
    parser.add_argument("--layouts", default="embedded,scale-out")
    args = parser.parse_args()

    results = Results("idle")
    poll_ms = 500.0  # REPORTS_POLL_S's default
    for name in args.layouts.split(","):
        layout = Layout.embedded() if name == "embedded" else Layout.scale_out()
        waits = pickup(layout, args.tasks)
        figures = idle(layout, args.connections, args.idle_s)
        per_bare = bare_memory(layout, args.connections)
        results.data[name] = {"queue_ms": waits, **figures, "bare_kb_per_connection": per_bare}
        p95 = percentile(waits, 95)
        results.add(
            f"{name}: submit → claimed, P50", percentile(waits, 50), "ms", baseline=poll_ms / 2
        )
        results.add(
            f"{name}: submit → claimed, P95",
            p95,
            "ms",
            baseline=poll_ms * 0.95,
            target="<= 50 ms",
            met=p95 <= 50,
        )
        results.add(
            f"{name}: idle CPU, no connections ({args.idle_s:g} s)",
            figures["cpu_no_connections"] * 100,
            "%",
            target="< 2%",
            met=figures["cpu_no_connections"] < 0.02,
        )
        results.add(
            f"{name}: idle CPU, {args.connections} idle WebSockets",
            figures["cpu_connected"] * 100,
            "%",
            target="< 2%",
            met=figures["cpu_connected"] < 0.02,
        )
        results.add(
            f"{name}: memory of the first {WARM_UP} WebSockets, one-time, all told",
            figures["first_connections_kb"],
            "KB",
        )
        results.add(
            f"{name}: memory per idle WebSocket",
            figures["kb_per_connection"],
            "KB",
            baseline=per_bare,
            target="<= 32 KB",
            met=figures["kb_per_connection"] <= 32,
        )
    results.show()
    print(f"saved {results.save()}")


if __name__ == "__main__":
    main()
