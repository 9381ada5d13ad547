"""Run the app (or the bare baseline) for a benchmark: a server or a worker process.

    python -m bench.serve --server daphne|uvicorn --port N [--bare] [--per-token]
    python -m bench.serve --worker --slots N [--per-token]

The app is the real one, configured by the environment; the benchmark options only
add probes and change what a baseline needs changed:

* `BENCH_PROBE=<file>`: append one line per provider stream (`stream task attempt t0`,
  t0 on the machine's monotonic clock, when the provider began; `streamend task attempt
  t` when it ended: a plan makes several per attempt) and per chunk written
  (`flush task start seconds`: the runner's wait for one chunk's write; the fan-out after
  it is not waited for), and
  per database write of chunks (`write count start seconds`).
* `--per-token`: the one-message-per-token baseline (every provider delta is its own
  event, transaction and message: no coalescing).
* `--report-chars N`: the simulated report is repeated (section by section) to about
  N characters, for the browser rendering benchmark.
* The simulated model writes each distinct report once per process: the streams of a
  run read the same document, and writing a report (15 to 19 ms of CPU) is the model's
  work, not the app's; a real provider does it on its own machine. Each stream still
  gets its own pace, heartbeats and deltas.
* `--bare`: serve `bench.bare` (no Django) instead of the app.
* `--static`: serve /static/ from the app's files too, as nginx does in production
  (with its cache lifetime).
* `BENCH_WS_DEFLATE=1`: uvicorn negotiates permessage-deflate, as it does unless told
  not to, for the baseline of the production layout's `--ws-per-message-deflate false`
  (docs/production.md).
* `BENCH_SWITCH_INTERVAL_S=<seconds>`: the interpreter's thread switch interval instead
  of the app's own (Python's default is 0.005), for the baseline of that choice.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", choices=("daphne", "uvicorn"), default="daphne")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--bare", action="store_true")
    parser.add_argument("--per-token", action="store_true")
    parser.add_argument("--report-chars", type=int, default=0)
    parser.add_argument("--static", action="store_true", help="serve /static/ too (pages)")
    args = parser.parse_args()

    if args.bare:
        run_server(args.server, "bench.bare:app", args.port)
        return
    if args.server == "daphne" and not args.worker:
        import daphne.server  # noqa: F401 - before the app: it starts the embedded worker

    import django

    django.setup()
    instrument(per_token=args.per_token, report_chars=args.report_chars)
    if os.environ.get("BENCH_SWITCH_INTERVAL_S"):
        sys.setswitchinterval(float(os.environ["BENCH_SWITCH_INTERVAL_S"]))
    if args.worker:
        from django.core.management import call_command

        from project.unreachable import close_pools

        try:
            call_command("reportworker", slots=args.slots)
        finally:
            close_pools()  # as manage.py does: no pool's threads left to Python's shutdown
    else:
        import project.asgi

        app = project.asgi.application
        if args.static:  # what nginx does in production
            from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

            app = CachedStatic(ASGIStaticFilesHandler(app))
        run_server(args.server, app, args.port)


class CachedStatic:
    """Serve /static/ with the lifetime nginx gives it in production (`expires 1h`,
    deploy/nginx.conf): a reload takes the page's stylesheet and scripts from the cache,
    as a user's browser does, instead of asking for each again."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith("/static/"):
            return await self.app(scope, receive, send)

        async def cached(message):
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (b"cache-control", b"max-age=3600")]
                message = {**message, "headers": headers}
            await send(message)

        return await self.app(scope, receive, cached)


def run_server(server: str, app, port: int) -> None:
    if server == "daphne":
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server

        if isinstance(app, str):
            from importlib import import_module

            module, _, name = app.partition(":")
            app = getattr(import_module(module), name)
        endpoints = build_endpoint_description_strings(host="127.0.0.1", port=port)
        Server(app, endpoints=endpoints, verbosity=0).run()
    else:
        import uvicorn

        # The app speaks neither lifespan nor cares: Channels' router has no lifespan.
        uvicorn.run(
            app,
            host="127.0.0.1",
            port=port,
            lifespan="off",
            log_level="warning",
            access_log=False,
            ws_per_message_deflate=os.environ.get("BENCH_WS_DEFLATE") == "1",
        )


def instrument(*, per_token: bool, report_chars: int) -> None:
    from bench.harness import lengthen
    from reports.providers.simulated import SimulatedProvider
    from reports.worker import attempt_core, pipeline

    if per_token:
        attempt_core.FLUSH_CHARS = 1  # every delta waits for nothing: one event per token
    probe_path = os.environ.get("BENCH_PROBE")
    if probe_path:
        probe = open(probe_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
        original_stream = SimulatedProvider.stream
        original_chunk_write = pipeline.AttemptRun._write

        def stream(self, request):
            probe.write(f"stream {request.task_id} {request.attempt_number} {time.monotonic()}\n")
            return _Probed(original_stream(self, request), probe, request)

        async def write(self, chunk):
            start = time.monotonic()
            await original_chunk_write(self, chunk)
            probe.write(f"flush {self.task_id} {start} {time.monotonic() - start}\n")

        from reports.models import TaskQuerySet

        original_append = TaskQuerySet.append_events

        def append_events(self, appends, **fields):
            start = time.monotonic()
            try:
                return original_append(self, appends, **fields)
            finally:
                probe.write(f"write {len(appends)} {start} {time.monotonic() - start}\n")

        SimulatedProvider.stream = stream
        pipeline.AttemptRun._write = write
        TaskQuerySet.append_events = append_events
    original_write = SimulatedProvider.write
    written: dict = {}

    def write_once(self, request):
        key = dataclasses.replace(request, task_id="", attempt_number=0)
        if key not in written:
            text = original_write(self, request)
            written[key] = lengthen(text, report_chars) if report_chars else text
        return written[key]

    SimulatedProvider.write = write_once


class _Probed:
    """A provider's stream, its end noted in the probe: it adds no step to each item
    (an async generator around it was a step of its own for every delta)."""

    def __init__(self, items, probe, request) -> None:
        self.items, self.probe, self.request = items, probe, request
        self.ended = False

    def __aiter__(self):
        return self

    def __anext__(self):
        return self.items.__anext__()

    async def aclose(self) -> None:  # the runner closes every stream it opened
        try:
            await self.items.aclose()
        finally:
            if not self.ended:
                self.ended = True
                request = self.request
                end = time.monotonic()
                self.probe.write(f"streamend {request.task_id} {request.attempt_number} {end}\n")


if __name__ == "__main__":
    sys.exit(main())
