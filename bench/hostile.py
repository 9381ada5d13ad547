"""Benchmark: hostile documents uploaded while normal reports stream.

    python -m bench.hostile [--streams 20] [--layout embedded|scale-out] [--quick]

Every class of hostile document the red teams have used (nested PDF forms, a page-tree
bomb, a flate bomb, quadratic HTML, an expanding .docx, mixed encodings; tests/security/
hostile.py builds them) is uploaded through the API while S normal reports are written and
followed over the WebSocket, round after round until every hostile task has ended. Measured:
each normal stream's largest gap between two messages carrying text, and each hostile
upload's answer, time to answer, outcome and time in the parse stage.

Targets: no normal stream's gap over 1 s; every hostile task out of its parse stage within
the parse limit (`REPORTS_PARSE_TIMEOUT_S`, here set low so that the run stays short). The
parse stage also holds the wait for one of the worker's blocking threads (a few, from the
cores): with more hostile documents than threads, the later ones wait for a thread while
the first are read, so the target allows one parse limit per round of threads.

`--quick` is a smaller run of the same path (4 streams at a fast local model's pace,
smaller documents, a 3 s parse limit), under 30 s even on a busy machine, for
tests/test_bench_quick.py: it checks what the full run measures without judging the
figures, which need the machine alone.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from bench import wsclient
from bench.fanout import run_clients
from bench.harness import SAMPLE, Layout, Results, serve, work

GAP_TARGET_S = 1.0
# Out of the parse stage within its wall-clock limit, plus this for the stage's reads and
# writes around the child.
PARSE_ALLOWANCE_S = 1.0
TERMINAL = {"succeeded", "failed", "cancelled", "reconciliation_required"}


@dataclass(frozen=True)
class Size:
    streams: int
    parse_cpu_s: int
    parse_timeout_s: float
    form_depth: int
    pages: int
    operators: int
    html_paragraphs: int
    docx_paragraphs: int
    mixed_mb: int
    profile: str  # the normal streams' pace (reports/providers/pacing.py)


FULL = Size(20, 10, 15, 24, 100_000, 2_000_000, 1_000_000, 100_000, 9, "openai")
QUICK = Size(4, 2, 3, 14, 20_000, 300_000, 150_000, 10_000, 1, "stress")


def hostile_documents(size: Size) -> list[tuple[str, str, bytes]]:
    """Return (class, file name, bytes) of each hostile document, at this size."""
    from tests.security import hostile

    return [
        ("nested PDF forms", "forms.pdf", hostile.pdf_with_nested_forms(size.form_depth)),
        ("page-tree bomb", "pages.pdf", hostile.pdf_with_a_huge_page_tree(size.pages)),
        ("flate bomb", "flood.pdf", hostile.pdf_that_explodes(size.operators)),
        ("quadratic HTML", "c.html", hostile.nested_html()),
        ("HTML hiding its text past the check", "hidden.html", hostile.html_hiding_its_text()),
        ("HTML slow to read", "slow.html", hostile.slow_html(size.html_paragraphs)),
        ("expanding .docx", "long.docx", hostile.docx_that_stalls(size.docx_paragraphs)),
        ("zip-bomb .docx", "bomb.docx", hostile.zip_bomb_docx()),
        ("mixed encodings", "mixed.txt", hostile.mixed_encoding_text(size.mixed_mb)),
    ]


@dataclass
class Upload:
    kind: str
    name: str
    bytes: int
    status: int = 0  # the HTTP answer to the upload
    answer_s: float = 0.0
    task_id: str = ""
    outcome: str = ""  # the task's end (status/error type), or the refusal's code
    ended_s: float | None = None  # from the upload's answer to the task's end


def upload(base_url: str, token: str, name: str, data: bytes) -> tuple[int, dict]:
    request = wsclient.upload_request(base_url, token, name, data, "application/octet-stream")
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read() or b"{}")


def task_status(base_url: str, token: str, task_id: str) -> dict:
    request = urllib.request.Request(
        f"{base_url}/api/tasks/{task_id}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


def send_hostile(base_url: str, token: str, documents, deadline_s: float) -> list[Upload]:
    """Upload every hostile document at once; follow each task to its end."""
    uploads = [Upload(kind, name, len(data)) for kind, name, data in documents]
    answered: dict[int, float] = {}

    def send(i: int, data: bytes) -> None:
        started = time.monotonic()
        status, body = upload(base_url, token, uploads[i].name, data)
        answered[i] = time.monotonic()
        uploads[i].status, uploads[i].answer_s = status, answered[i] - started
        if status == 201:
            uploads[i].task_id = body["task_id"]
        else:
            uploads[i].outcome = f"refused {status} {body.get('error', {}).get('code', '')}"

    senders = [
        threading.Thread(target=send, args=(i, data)) for i, (_, _, data) in enumerate(documents)
    ]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()
    give_up = time.monotonic() + deadline_s
    waiting = {i for i, u in enumerate(uploads) if u.task_id}
    while waiting and time.monotonic() < give_up:
        for i in sorted(waiting):
            body = task_status(base_url, token, uploads[i].task_id)
            if body["status"] in TERMINAL:
                error = (body.get("error") or {}).get("type") or ""
                uploads[i].outcome = f"{body['status']} {error}".strip()
                uploads[i].ended_s = time.monotonic() - answered[i]
                waiting.discard(i)
        time.sleep(0.2)
    for i in waiting:
        uploads[i].outcome = "still running"
    return uploads


def largest_gap_s(client: dict) -> float | None:
    """Return the longest wait between two messages of a stream that carried text."""
    times = [received for received, _, deltas in client["messages"] if deltas]
    return max((b - a for a, b in itertools.pairwise(times)), default=None)


def run(layout: Layout, size: Size, *, timeout_s: float = 600) -> dict:
    """Run the normal streams and the hostile uploads together; return what was measured."""
    documents = hostile_documents(size)
    slots = size.streams + len(documents)
    env = layout.environ(
        REPORTS_SIMULATED_PROFILE=size.profile,
        REPORTS_SIMULATED_SEED=0,
        REPORTS_MAX_RUNNING=slots,
        REPORTS_LANE_LIMITS=f"short={slots},long={len(documents)}",
        REPORTS_EMBEDDED_SLOTS=slots,
        REPORTS_QUEUE_LIMIT=slots * 4,
        REPORTS_EMBEDDED_WORKER="1" if layout.name == "embedded" else "0",
        REPORTS_PARSE_CPU_S=size.parse_cpu_s,
        REPORTS_PARSE_TIMEOUT_S=size.parse_timeout_s,
    )
    user = layout.django("prepare", env=env)
    server = serve(layout, env)
    processes = [server]
    if layout.name == "scale-out":
        processes.append(work(layout, env, slots=slots))
    try:
        server.wait_ready()
        config = {
            "base_url": server.url,
            "mode": "app",
            "streams": size.streams,
            "document": str(SAMPLE),
            "timeout_s": timeout_s,
            "stagger_s": 0.05,
            **user,
        }
        clients: list[dict] = []
        hostile: list[Upload] = []

        def attack() -> None:
            time.sleep(1.0)  # the normal streams are under way
            hostile.extend(send_hostile(server.url, user["token"], documents, timeout_s))

        attacker = threading.Thread(target=attack)
        attacker.start()
        # Round after round of normal streams, so that some are always running while the
        # hostile documents are read.
        while True:
            clients += run_clients(config)
            if not attacker.is_alive():
                break
        attacker.join()
        stages = layout.django("plan", *[u.task_id for u in hostile if u.task_id], env=env)
    finally:
        for process in processes:
            process.stop()
    parse_s = {
        task_id: row["parse_ms"] / 1000 for task_id, row in stages.items() if row["parse_ms"]
    }
    gaps = [largest_gap_s(c) for c in clients if not c["error"]]
    return {
        "layout": layout.name,
        "size": size.__dict__,
        "streams": len(clients),
        "stream_errors": [c["error"] for c in clients if c["error"]],
        "largest_gaps_s": gaps,
        "hostile": [{**u.__dict__, "parse_s": parse_s.get(u.task_id)} for u in hostile],
    }


def parse_limit_s(figures: dict, size: Size) -> float:
    """Return how long a hostile task may spend in its parse stage: the wall-clock limit
    once per round of the blocking threads the accepted hostile documents fill."""
    from reports.threads import BLOCKING_THREADS

    accepted = sum(1 for entry in figures["hostile"] if entry["task_id"])
    rounds = max(1, math.ceil(accepted / BLOCKING_THREADS))
    return rounds * size.parse_timeout_s + PARSE_ALLOWANCE_S


def within_parse_limit(entry: dict, limit_s: float) -> bool:
    """Tell whether a hostile upload was refused, or its task left the parse stage in time."""
    if not entry["task_id"]:
        return entry["status"] in (400, 413, 415)
    parse_s = entry["parse_s"]
    ended = entry["outcome"] != "still running"
    return ended and parse_s is not None and parse_s <= limit_s


def report(figures: dict, size: Size) -> Results:
    results = Results("hostile", data=figures)
    gaps = [g for g in figures["largest_gaps_s"] if g is not None]
    worst = max(gaps, default=None)
    results.add(
        "normal streams (all rounds)", figures["streams"], target="no stream failed",
        met=not figures["stream_errors"],
    )  # fmt: skip
    results.add(
        "largest gap between text messages, worst stream", worst, "s",
        target=f"<= {GAP_TARGET_S:g} s", met=worst is not None and worst <= GAP_TARGET_S,
    )  # fmt: skip
    limit_s = parse_limit_s(figures, size)
    for entry in figures["hostile"]:
        parse = entry["parse_s"]
        results.add(
            f"{entry['kind']}: {entry['outcome']}",
            parse if parse is not None else entry["answer_s"],
            "s",
            target=f"parse <= {limit_s:g} s" if entry["task_id"] else "refused at upload",
            met=within_parse_limit(entry, limit_s),
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int)
    parser.add_argument("--layout", choices=("embedded", "scale-out"), default="embedded")
    parser.add_argument("--quick", action="store_true", help="a short run (under 30 s)")
    args = parser.parse_args()
    size = QUICK if args.quick else FULL
    if args.streams:
        size = Size(**{**size.__dict__, "streams": args.streams})
    layout = Layout.embedded() if args.layout == "embedded" else Layout.scale_out()
    results = report(run(layout, size), size)
    results.show()
    if not args.quick:  # a quick run's figures are not the benchmark's
        print(f"\nwritten to {results.save()}")


if __name__ == "__main__":
    main()
