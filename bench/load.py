"""Load test: N SSE and N WebSocket clients at once against the real app.

    python -m bench.load [--layout embedded|scale-out] [--server daphne|uvicorn]
                         [--sse 300] [--ws 300] [--tasks 10]

Every client follows one of a few queued tasks of one user (no worker runs, so every
stream stays open and idle). With all of them open it checks, and reports:

* every handshake succeeded (SSE: 200 with its headers; WebSocket: accepted);
* scale-out: the PostgreSQL connections of the whole system (`pg_stat_activity`) stay
  within the pool of each process, however many streams are open;
* a normal request (`GET /api/tasks`) stays fast;
* one stream over the user's cap (`REPORTS_MAX_STREAMS_PER_USER`, set to exactly the
  clients opened) answers 429 `too_many_streams`.

Prints one JSON document; exits 1 when a check fails. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import urllib.request

import websockets

from bench.harness import SAMPLE, Layout, serve
from bench.wsclient import submit

HANDSHAKE_TIMEOUT_S = 10.0  # what a browser or a proxy would give a handshake, at most
POOL_SIZE = 8  # the app's default REPORTS_DB_POOL_SIZE
FAST_REQUEST_S = 1.0  # a normal request while every stream is open


async def open_sse(base: str, token: str, task_id: str) -> tuple[int, asyncio.StreamWriter]:
    """Send the request and read the response's head; return its status and the socket."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        (
            f"GET /api/tasks/{task_id}/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HANDSHAKE_TIMEOUT_S)
    status = int(head.split(b" ", 2)[1])
    if status != 200:
        writer.close()
    return status, writer


async def open_ws(ws_base: str, cookie: str, origin: str, task_id: str):
    return await websockets.connect(
        f"{ws_base}/ws/tasks/{task_id}/",
        additional_headers={"Cookie": f"sessionid={cookie}", "Origin": origin},
        open_timeout=HANDSHAKE_TIMEOUT_S,
    )


def timed_get(url: str, token: str) -> float:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=30) as reply:
        reply.read()
    return time.monotonic() - started


def over_the_cap(base: str, token: str, task_id: str) -> tuple[int, str]:
    request = urllib.request.Request(
        f"{base}/api/tasks/{task_id}/events", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, ""
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())["error"]["code"]


def database_connections(database_url: str) -> int:
    import psycopg

    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]


async def load(base: str, user: dict, tasks: list[str], *, sse: int, ws: int) -> dict:
    ws_base = base.replace("http", "ws", 1)
    started = time.monotonic()
    results = await asyncio.gather(
        *(open_sse(base, user["token"], tasks[i % len(tasks)]) for i in range(sse)),
        *(open_ws(ws_base, user["cookie"], base, tasks[i % len(tasks)]) for i in range(ws)),
        return_exceptions=True,
    )
    handshakes_s = time.monotonic() - started
    sse_results, ws_results = results[:sse], results[sse:]
    figures = {
        "sse_ok": sum(1 for r in sse_results if isinstance(r, tuple) and r[0] == 200),
        "ws_ok": sum(1 for r in ws_results if not isinstance(r, BaseException)),
        "errors": sorted({repr(r)[:200] for r in results if isinstance(r, BaseException)}),
        "handshakes_s": round(handshakes_s, 2),
    }
    request_s = [
        await asyncio.to_thread(timed_get, f"{base}/api/tasks", user["token"]) for _ in range(10)
    ]
    figures["request_ms_median"] = round(statistics.median(request_s) * 1000, 1)
    figures["request_ms_max"] = round(max(request_s) * 1000, 1)
    figures["over_cap"] = await asyncio.to_thread(over_the_cap, base, user["token"], tasks[0])
    for result in sse_results:
        if isinstance(result, tuple):
            result[1].close()
    await asyncio.gather(
        *(r.close() for r in ws_results if not isinstance(r, BaseException)),
        return_exceptions=True,
    )
    return figures


def run(layout: Layout, *, sse: int, ws: int, tasks: int, server: str = "daphne") -> dict:
    """Run the load against a fresh server of `layout`; return the figures and checks."""
    env = layout.environ(
        REPORTS_EMBEDDED_WORKER="0",  # the tasks stay queued: every stream stays open
        REPORTS_MAX_STREAMS_PER_USER=sse + ws,
        REPORTS_QUEUE_LIMIT=tasks * 2,
    )
    user = layout.django("prepare", env=env)
    process = serve(layout, env, server=server)
    try:
        process.wait_ready()
        task_ids = [submit(process.url, user["token"], str(SAMPLE)) for _ in range(tasks)]
        figures = asyncio.run(load(process.url, user, task_ids, sse=sse, ws=ws))
        if layout.name == "scale-out":
            figures["pg_connections"] = database_connections(layout.env["DATABASE_URL"])
        figures["rss_mb"] = round(process.rss_kb() / 1024, 1)
    finally:
        process.stop()
    figures.update(layout=layout.name, server=server, sse=sse, ws=ws, tasks=tasks)
    figures["checks"] = checks(figures)
    return figures


def checks(figures: dict) -> dict[str, bool]:
    found = {
        "every_handshake": figures["sse_ok"] == figures["sse"]
        and figures["ws_ok"] == figures["ws"],
        "normal_request_fast": figures["request_ms_max"] <= FAST_REQUEST_S * 1000,
        "over_cap_429": figures["over_cap"] == (429, "too_many_streams"),
    }
    if "pg_connections" in figures:
        # the web process's pool, and the benchmark's own preparing process gone by now
        found["pg_connections_bounded"] = figures["pg_connections"] <= POOL_SIZE
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layout", choices=("embedded", "scale-out"), default="embedded")
    parser.add_argument("--server", choices=("daphne", "uvicorn"), default="daphne")
    parser.add_argument("--sse", type=int, default=300)
    parser.add_argument("--ws", type=int, default=300)
    parser.add_argument("--tasks", type=int, default=10)
    args = parser.parse_args()
    layout = Layout.embedded() if args.layout == "embedded" else Layout.scale_out()
    figures = run(layout, sse=args.sse, ws=args.ws, tasks=args.tasks, server=args.server)
    print(json.dumps(figures, indent=2))
    sys.exit(0 if all(figures["checks"].values()) else 1)


if __name__ == "__main__":
    main()
