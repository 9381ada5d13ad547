"""Benchmark: Reportline in front of llama.cpp's own llama-server with a real model.

    python -m bench.llama [--runs 20] [--tokens 48] [--fanout 8] [--quick]

One llama-server (xllamacpp's build, SmolLM2-135M-Instruct, two slots of 2,048 tokens,
tests/providers/llama_server.py) serves both sides of the same run:

* Time to first text. The app (daphne, SQLite, the embedded worker, the `openai`
  provider pointed at the server) gets a short document (a fresh one each run) and the
  client follows the task's event stream. Reportline's added time to first text is the
  client's time from submit to the first `delta` event, less llama-server's own time to
  first token for that call (from the provider sending the request to the first text it
  received, measured inside the app). Baseline, in the same run: a bare client streaming
  the very messages the app sent (the first character of the user message changed, so
  that the server's prompt cache holds the same prefix for both) straight to the server.
  Target: added time ≤ 50 ms at P95.
* Delay per token: for every piece of text the provider received, the time until the
  client received the event carrying it (P50, P99; target ≤ 5 ms at P99). Events
  coalesce text for up to 100 ms by design (docs/architecture.md), so the delay of an
  event counted from the newest text it carries is given too.
* Fan-out: N reports (default 8) submitted at once through the two slots. Sampled every
  quarter second: the server's own queue (`/metrics` requests_deferred: calls waiting
  inside llama-server, where nobody sees them), its busy slots, and each task's
  `queue_position` (Reportline's own, visible queue). A call stalls when no text arrives
  for 30 s once it has begun; every task must end in a true state.

`--quick` (under 40 s on a quiet machine, tests/test_bench_quick.py): two runs of 8
tokens and a fan-out of 3, with the stall and response clocks lifted to 300 s; it fails
only on lost or wrong text or a task that ended for the chain's fault. The timed run
keeps the app's default clocks, so a call that waits too long inside the server shows.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2

from bench.harness import PYTHON, Layout, Process, Results, free_port, percentile

WINDOW, SLOTS = 2048, 2
ADDED_TTFT_TARGET_MS, TOKEN_DELAY_TARGET_MS = 50.0, 5.0
STALL_S = 30.0
TRUE_ENDS = {"succeeded", "validation_failed", "degenerate_output", "stream_truncated"}
TRUE_ENDS |= {"empty_output"}
DOCUMENT = (
    "# Harbour log {n}\n\nEntry {n}: the tide turned at noon and the harbour master logged "
    "{ships} ships. The turbine at the narrow entrance ran for eight hours.\n"
)


# --- the app, instrumented: when each call began and when its text arrived ------------------


def instrument(probe_path: str) -> None:
    """Note, per provider call, when it began, the messages it sent, and the time and
    length of each piece of text it received (monotonic, on this machine)."""
    from reports.providers import openai as adapter
    from reports.providers.base import TextDelta

    probe = open(probe_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    original = adapter.OpenAIProvider._stream_once

    async def stream_once(self, request):
        messages = adapter.build_messages(request)
        line = {"task": request.task_id, "t": time.monotonic(), "messages": messages}
        probe.write("call " + json.dumps(line) + "\n")
        async for item in original(self, request):
            if isinstance(item, TextDelta) and item.text:
                probe.write(f"text {request.task_id} {time.monotonic()} {len(item.text)}\n")
            yield item

    adapter.OpenAIProvider._stream_once = stream_once


def serve_app(port: int) -> None:
    import daphne.server  # noqa: F401 - before the app: it starts the embedded worker
    import django

    django.setup()
    instrument(os.environ["BENCH_PROBE"])
    import project.asgi
    from bench.serve import run_server

    run_server("daphne", project.asgi.application, port)


def read_probe(path: Path) -> tuple[dict, dict]:
    """Return each task's calls (time, messages) and its texts (time, characters)."""
    calls: dict[str, list] = {}
    texts: dict[str, list] = {}
    for line in path.read_text().splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "call":
            call = json.loads(rest)
            calls.setdefault(call["task"], []).append(call)
        elif kind == "text":
            task, at, chars = rest.split()
            texts.setdefault(task, []).append((float(at), int(chars)))
    return calls, texts


# --- the client ------------------------------------------------------------------------------


class Client:
    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}

    def submit(self, text: str, name: str) -> str:
        response = httpx2.post(
            f"{self.url}/api/tasks",
            headers=self.headers,
            files={"files": (name, text.encode(), "text/markdown")},
            timeout=60,
        )
        response.raise_for_status()
        return response.json()["task_id"]

    def task(self, task_id: str) -> dict:
        return httpx2.get(
            f"{self.url}/api/tasks/{task_id}", headers=self.headers, timeout=30
        ).json()

    def follow(self, task_id: str) -> dict:
        """Read the task's event stream to its end; return each delta's receipt time and
        length, and the terminal event."""
        deltas, end, event = [], None, None
        url = f"{self.url}/api/tasks/{task_id}/events"
        with httpx2.stream("GET", url, headers=self.headers, timeout=600) as response:
            for line in response.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event:
                    data = json.loads(line[6:])
                    if event == "delta":
                        deltas.append((time.monotonic(), len(data["text"])))
                    elif event in ("succeeded", "failed", "cancelled", "reconciliation_required"):
                        end = {"status": event, **data}
                        break
        return {"deltas": deltas, "end": end}


def bare_ttft(server, messages: list[dict], max_tokens: int) -> tuple[float, dict]:
    """Stream `messages` straight to llama-server; return seconds to the first text and
    the usage it reported."""
    body = {
        "model": "smollm2",
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    first, usage = None, {}
    start = time.monotonic()
    with httpx2.stream("POST", f"{server.base_url}/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                if first is None and (choice.get("delta") or {}).get("content"):
                    first = time.monotonic() - start
    return first, usage


def uncached_twin(messages: list[dict]) -> list[dict]:
    """Return `messages` with the user message's first character changed: the server's
    prompt cache then holds only the system message for it, as it did for the app."""
    system, user = messages
    content = user["content"]
    twin = ("[" if content[0] != "[" else "(") + content[1:]
    return [system, {**user, "content": twin}]


# --- the measures ---------------------------------------------------------------------------


def token_delays(provider_texts: list, client_deltas: list) -> tuple[list, list]:
    """Return, in ms, each provider text's delay until the client had it, and each client
    event's delay from the newest provider text it carries.

    Both lists hold (monotonic time, characters) in order; text is matched by offset."""
    ends, total = [], 0
    for at, chars in provider_texts:
        total += chars
        ends.append((total, at))  # the provider had characters up to `total` at `at`
    per_token, per_event = [], []
    received, i = 0, 0
    for at, chars in client_deltas:
        received += chars
        newest = None
        while i < len(ends) and ends[i][0] <= received:
            per_token.append((at - ends[i][1]) * 1000)
            newest = ends[i][1]
            i += 1
        if newest is not None:
            per_event.append((at - newest) * 1000)
    return per_token, per_event


def first_text_runs(server, client: Client, probe: Path, runs: int, tokens: int) -> dict:
    samples = {"added_ms": [], "app_ms": [], "server_in_app_ms": [], "bare_ms": []}
    delays = {"token_ms": [], "event_ms": []}
    checks = {"text_whole": 0, "true_end": 0, "runs": runs}
    tokens_seen = []
    for n in range(runs):
        server.wait_until_idle(120)
        started = time.monotonic()
        task_id = client.submit(DOCUMENT.format(n=n, ships=n * 7 + 3), f"log-{n}.md")
        followed = client.follow(task_id)
        calls, texts = read_probe(probe)
        call = calls[task_id][-1]
        provider_texts = texts.get(task_id, [])
        end = followed["end"] or {}
        checks["true_end"] += end.get("status") == "succeeded" or end.get("error_type") in TRUE_ENDS
        client_chars = sum(c for _, c in followed["deltas"])
        checks["text_whole"] += client_chars == sum(c for _, c in provider_texts) > 0
        if followed["deltas"] and provider_texts:
            app = (followed["deltas"][0][0] - started) * 1000
            in_app = (provider_texts[0][0] - call["t"]) * 1000
            samples["app_ms"].append(app)
            samples["server_in_app_ms"].append(in_app)
            samples["added_ms"].append(app - in_app)
            per_token, per_event = token_delays(provider_texts, followed["deltas"])
            delays["token_ms"] += per_token
            delays["event_ms"] += per_event
        server.wait_until_idle(120)
        bare, usage = bare_ttft(server, uncached_twin(call["messages"]), tokens)
        if bare is not None:
            samples["bare_ms"].append(bare * 1000)
        app_usage = client.task(task_id).get("usage") or {}
        tokens_seen.append(
            {
                "app": [app_usage.get("input_tokens"), app_usage.get("cached_tokens")],
                "bare": [
                    usage.get("prompt_tokens"),
                    (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
                ],
            }
        )
    return {"samples": samples, "delays": delays, "checks": checks, "prompt_tokens": tokens_seen}


def fan_out(server, client: Client, reports: int) -> dict:
    """Submit `reports` at once; sample both queues until every task has ended."""
    with ThreadPoolExecutor(reports) as pool:
        docs = [DOCUMENT.format(n=1000 + i, ships=i) for i in range(reports)]
        ids = list(pool.map(lambda i: client.submit(docs[i], f"fan-{i}.md"), range(reports)))
        followed = [pool.submit(client.follow, task_id) for task_id in ids]
        samples, positions = [], {task_id: set() for task_id in ids}
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                metrics = server.metrics()
                queued = 0
                for task_id in ids:
                    body = client.task(task_id)
                    if body.get("queue_position") is not None:
                        positions[task_id].add(body["queue_position"])
                        queued += 1
                samples.append(
                    {
                        "t": time.monotonic(),
                        "in_server_queue": metrics.get("requests_deferred", 0),
                        "processing": metrics.get("requests_processing", 0),
                        "busy_slots": server.busy_slots(),
                        "in_our_queue": queued,
                    }
                )
                stop.wait(0.25)

        sampler = threading.Thread(target=sample)
        sampler.start()
        results = [f.result() for f in followed]
        stop.set()
        sampler.join()
    silences = []
    for result in results:
        times = [at for at, _ in result["deltas"]]
        silences += [b - a for a, b in itertools.pairwise(times)]
    ends = [r["end"] or {} for r in results]
    return {
        "reports": reports,
        "ends": [[e.get("status"), e.get("error_type")] for e in ends],
        "true_ends": sum(
            e.get("status") == "succeeded" or e.get("error_type") in TRUE_ENDS for e in ends
        ),
        "max_in_server_queue": max((s["in_server_queue"] for s in samples), default=0),
        "max_in_our_queue": max((s["in_our_queue"] for s in samples), default=0),
        "positions_seen": {k: sorted(v) for k, v in positions.items()},
        "longest_silence_s": max(silences, default=0.0),
        "stalled": sum(s > STALL_S for s in silences),
        "samples": samples,
    }


def measure(*, runs: int, tokens: int, reports: int, patient: bool = False) -> dict:
    """Run the benchmark; `patient` lifts the stall and response clocks to 300 s, for a
    check on a busy machine (the timed run keeps the app's defaults: 30 s and 60 s)."""
    from tests.providers.llama_server import start_server

    layout = Layout.embedded()
    server = start_server(layout.data_dir, n_ctx=WINDOW, slots=SLOTS)
    probe = layout.data_dir / "probe.txt"
    env = layout.environ(
        BENCH_PROBE=probe,
        REPORTS_PROVIDER="openai",
        REPORTS_PROVIDER_DIALECT="llama-server",  # its slots and its reading progress
        OPENAI_BASE_URL=server.base_url,
        REPORTS_MODEL="smollm2",
        REPORTS_MODEL_PRICE="0,0,0",
        REPORTS_CONTEXT_TOKENS=WINDOW,
        REPORTS_MAX_OUTPUT_TOKENS=tokens,
        **(
            {"REPORTS_STALL_TIMEOUT_S": 300, "REPORTS_PROVIDER_RESPONSE_TIMEOUT_S": 300}
            if patient
            else {}
        ),
    )
    app = None
    try:
        user = layout.django("prepare", env=env)
        port = free_port()
        app = Process(
            ["-m", "bench.llama", "--serve-app", str(port)],
            env,
            layout.data_dir / "app.log",
            port,
            program=PYTHON,
        ).wait_ready()
        client = Client(app.url, user["token"])
        # The first call reads the system message into the server's prompt cache.
        warm = client.submit(DOCUMENT.format(n=-1, ships=0), "warm.md")
        client.follow(warm)
        figures = first_text_runs(server, client, probe, runs, tokens)
        figures["fan_out"] = fan_out(server, client, reports) if reports else None
        figures["server"] = {"window": WINDOW, "slots": SLOTS, "props": server.get("/props").json()}
        figures["server"]["props"].pop("chat_template", None)
        # The model's file, not where this machine keeps it.
        path = figures["server"]["props"].get("model_path", "")
        figures["server"]["props"]["model_path"] = path.rsplit("/", 1)[-1]
        return figures
    finally:
        if app is not None:
            app.stop()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=48, help="each report's output cap")
    parser.add_argument("--fanout", type=int, default=8, help="reports submitted at once")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--serve-app", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_app:
        serve_app(args.serve_app)
        return
    if args.quick:
        args.runs, args.tokens, args.fanout = 2, 8, 3
    figures = measure(runs=args.runs, tokens=args.tokens, reports=args.fanout, patient=args.quick)
    samples, delays = figures["samples"], figures["delays"]
    results = Results("llama-quick" if args.quick else "llama")
    results.data = figures
    for p in (50, 95):
        added = percentile(samples["added_ms"], p)
        results.add(
            f"added time to first text over llama-server's, P{p}",
            added,
            "ms",
            baseline=percentile(samples["bare_ms"], p),
            target=f"<= {ADDED_TTFT_TARGET_MS:g} ms" if p == 95 else "",
            met=added is not None and added <= ADDED_TTFT_TARGET_MS if p == 95 else None,
        )
    results.add(
        "llama-server's time to first text, in the app, P50",
        percentile(samples["server_in_app_ms"], 50),
        "ms",
        baseline=percentile(samples["bare_ms"], 50),
    )
    for p in (50, 99):
        value = percentile(delays["token_ms"], p)
        results.add(
            f"delay per token, provider to client, P{p}",
            value,
            "ms",
            target=f"<= {TOKEN_DELAY_TARGET_MS:g} ms" if p == 99 else "",
            met=value is not None and value <= TOKEN_DELAY_TARGET_MS if p == 99 else None,
        )
    results.add(
        "delay per event from its newest text, P99", percentile(delays["event_ms"], 99), "ms"
    )
    checks = figures["checks"]
    results.add(
        "runs whose text reached the client whole", checks["text_whole"], target=str(args.runs)
    )
    results.add("runs that ended in a true state", checks["true_end"], target=str(args.runs))
    fan = figures["fan_out"]
    if fan:
        results.add(
            f"fan-out of {fan['reports']}: true ends", fan["true_ends"], target=str(fan["reports"])
        )
        results.add(
            "fan-out: most calls queued inside llama-server", fan["max_in_server_queue"], target="0"
        )
        results.add(
            "fan-out: most tasks in Reportline's queue (positions shown)", fan["max_in_our_queue"]
        )
        results.add(
            "fan-out: longest silence in a stream",
            fan["longest_silence_s"],
            "s",
            target=f"< {STALL_S:g} s",
        )
    results.show()
    print(f"saved {results.save()}")


if __name__ == "__main__":
    main()
