"""Benchmark 9: a whole manual through a small window, in a plan of calls.

    python -m bench.plan [--runs 3] [--slots 4]

The manual: the first pages of the Nettle manual (tests/fixtures/corpus/nettle-manual.pdf)
up to about 72,000 characters of text, 18,000 tokens: the size of the libtasn1 manual.
Three ways through the whole app over HTTP (POST /api/tasks, the event stream to the
terminal event, the result, the passages by GET /api/tasks/<id>/sources/<sid>), the
simulated model at the `openai` profile's pacing, each in its own server with an
embedded worker, taken in turn so that all three see the same machine:

* plan — the manual through a 4,096-token window (1,024 of them for the output): a plan
  of part calls side by side, then the report from their notes;
* single — the baseline of time: the same manual in one call, on a window that holds it;
* cut — the baseline of coverage: what one call on the small window read before the
  plan existed, the manual's first pages that fit its input (three characters a token).

Figures: end-to-end time (target ≤ 1.5 times single with two or more slots free); the plan's
own overhead (target ≤ 5 % of its time): the time between its calls when none was
streaming, plus what planning added to the parse and prepare stages over the single
call; and coverage: the share of the manual's passages cited in each third of it.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import ROOT, Layout, Process, Results, serve

MANUAL = ROOT / "tests" / "fixtures" / "corpus" / "nettle-manual.pdf"
MANUAL_CHARS = 72_000
WINDOW = 4_096
OUTPUT = 1_024
LARGE_WINDOW = 32_768
CHARS_PER_TOKEN = 3  # the provider layer's count when it knows no better
TERMINAL = ("succeeded", "failed", "cancelled", "reconciliation_required")
CITATION = re.compile(r"\[(S\d+(?:\s*,\s*S\d+)*)\]")
TIME_TARGET = 1.5
OVERHEAD_TARGET = 0.05


# --- the documents ------------------------------------------------------------------------


def first_pages(chars: int, source: Path = MANUAL) -> tuple[bytes, int, int]:
    """Return a PDF of `source`'s first pages holding about `chars` characters of text,
    with its page count and characters."""
    import pypdf

    reader = pypdf.PdfReader(source)
    writer = pypdf.PdfWriter()
    total = 0
    for page in reader.pages:
        text = len(page.extract_text() or "")
        if total and total + text > chars:
            break
        writer.add_page(page)
        total += text
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue(), len(writer.pages), total


# --- one task over HTTP -------------------------------------------------------------------


@dataclass
class Run:
    task_id: str
    seconds: float
    status: str
    deltas: dict[int, str] = field(default_factory=dict)  # attempt: its streamed text
    progress: list[dict] = field(default_factory=list)
    report: str = ""
    cited: set[str] = field(default_factory=set)


def api(base_url: str, token: str, path: str, **kwargs) -> urllib.request.Request:
    headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
    return urllib.request.Request(f"{base_url}{path}", headers=headers, **kwargs)


def submit(base_url: str, token: str, name: str, document: bytes) -> str:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
            "Content-Type: application/pdf\r\n\r\n"
        ).encode()
        + document
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = api(
        base_url,
        token,
        "/api/tasks",
        data=body,
        method="POST",
        headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Idempotency-Key": uuid.uuid4().hex,
        },
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())["task_id"]


def follow(base_url: str, token: str, task_id: str, timeout_s: float) -> tuple[str, dict, list]:
    """Read the task's event stream to its terminal event: (status, texts, progress)."""
    texts: dict[int, str] = {}
    progress: list[dict] = []
    request = api(base_url, token, f"/api/tasks/{task_id}/events")
    with urllib.request.urlopen(request, timeout=timeout_s) as stream:
        kind = None
        for raw in stream:
            line = raw.decode().rstrip("\n")
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind is not None:
                data = json.loads(line.split(":", 1)[1])
                if kind == "delta":
                    texts[data["attempt"]] = texts.get(data["attempt"], "") + data["text"]
                elif kind == "progress":
                    progress.append(data)
                elif kind in TERMINAL:
                    return kind, texts, progress
                kind = None
    return "stream ended", texts, progress


def run_task(server: Process, token: str, name: str, document: bytes, timeout_s: float) -> Run:
    start = time.monotonic()
    task_id = submit(server.url, token, name, document)
    status, texts, progress = follow(server.url, token, task_id, timeout_s)
    run = Run(task_id, time.monotonic() - start, status, texts, progress)
    if status == "succeeded":
        with urllib.request.urlopen(
            api(server.url, token, f"/api/tasks/{task_id}/result"), timeout=60
        ) as reply:
            run.report = reply.read().decode()
        body = run.report.split("\n## Sources", 1)[0]
        run.cited = {sid.strip() for group in CITATION.findall(body) for sid in group.split(",")}
    return run


def passage(server: Process, token: str, task_id: str, sid: str) -> dict | None:
    request = api(server.url, token, f"/api/tasks/{task_id}/sources/{sid}")
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


# --- the figures --------------------------------------------------------------------------


def streams_of(probe: Path, task_id: str) -> list[tuple[float, float]]:
    """Return each provider call of the task as (start, end) on the monotonic clock."""
    open_at: list[float] = []
    spans = []
    if probe.exists():
        for line in probe.read_text().splitlines():
            kind, key, *rest = line.split()
            if key != task_id:
                continue
            if kind == "stream":
                open_at.append(float(rest[1]))
            elif kind == "streamend":  # pairs in order: only the count of open calls is used
                spans.append((open_at.pop(0), float(rest[1])))
    return spans


def idle_between(spans: list[tuple[float, float]]) -> float:
    """Return the seconds from the first call's start to the last call's end when no call
    was streaming (counted from the starts and ends alone: which end closes which start
    does not matter)."""
    edges = [(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans]
    idle, streaming, quiet_since = 0.0, 0, None
    for at, step in sorted(edges, key=lambda edge: (edge[0], -edge[1])):
        if step == 1 and streaming == 0 and quiet_since is not None:
            idle += at - quiet_since
        streaming += step
        if streaming == 0:
            quiet_since = at
    return idle


def coverage(cited_numbers: set[int], total: int) -> list[float]:
    """Return the share of passages cited in each third of S1…S<total>."""
    thirds = [range(1 + total * i // 3, 1 + total * (i + 1) // 3) for i in range(3)]
    return [
        len(cited_numbers.intersection(third)) / len(third) if len(third) else 0.0
        for third in thirds
    ]


def manual_passages(server: Process, token: str, task_id: str) -> list[dict]:
    """Return every passage of a task, S1 onwards, through the API."""
    found, number = [], 1
    while (item := passage(server, token, task_id, f"S{number}")) is not None:
        found.append(item)
        number += 1
    return found


def cut_coverage_numbers(server: Process, token: str, run: Run, manual: list[dict]) -> set[int]:
    """Return the manual's passage numbers the cut report cited: its passages are the
    manual's first ones, matched by page and text."""
    by_text = {(p["page"], p["text"]): n for n, p in enumerate(manual, start=1)}
    numbers = set()
    for sid in run.cited:
        item = passage(server, token, run.task_id, sid)
        if item is not None and (item["page"], item["text"]) in by_text:
            numbers.add(by_text[(item["page"], item["text"])])
    return numbers


# --- the run ------------------------------------------------------------------------------


@dataclass
class Way:
    name: str
    window: int
    document: bytes
    layout: Layout | None = None
    server: Process | None = None
    token: str = ""
    probe: Path | None = None
    runs: list[Run] = field(default_factory=list)


def start(way: Way, slots: int) -> None:
    way.layout = Layout.embedded()
    way.probe = way.layout.data_dir / "probe.txt"
    env = way.layout.environ(
        BENCH_PROBE=way.probe,
        REPORTS_SIMULATED_PROFILE="openai",
        REPORTS_CONTEXT_TOKENS=way.window,
        REPORTS_MAX_OUTPUT_TOKENS=OUTPUT,
        REPORTS_MAX_RUNNING=slots,
        REPORTS_LANE_LIMITS=f"short={slots},long={slots}",
        REPORTS_EMBEDDED_SLOTS=slots,
        REPORTS_EMBEDDED_WORKER="1",
    )
    way.token = way.layout.django("prepare", env=env)["token"]
    way.server = serve(way.layout, env)
    way.server.wait_ready()


def measure(
    manual_chars: int, runs: int, slots: int, timeout_s: float, baselines: bool = True
) -> dict:
    """Run the three ways (only the plan without `baselines`) `runs` times in turn;
    return what the figures are made of."""
    manual, pages, chars = first_pages(manual_chars)
    # Less than the whole input budget: the prompt's own words take some of it, and the
    # cut input must be read in one call.
    budget_chars = int(0.9 * (WINDOW - OUTPUT) * CHARS_PER_TOKEN)
    cut, cut_pages, cut_chars = first_pages(budget_chars)
    ways = [Way("plan", WINDOW, manual)]
    if baselines:
        ways += [Way("single", LARGE_WINDOW, manual), Way("cut", WINDOW, cut)]
    try:
        for way in ways:
            start(way, slots)
        for _ in range(runs):
            for way in ways:
                way.runs.append(
                    run_task(way.server, way.token, "manual.pdf", way.document, timeout_s)
                )
        plan = ways[0]
        stored = plan.layout.django("plan", *[r.task_id for r in plan.runs], env=_env(plan))
        passages = base = cut_numbers = cut_stored = None
        if baselines:
            _, single, cut_way = ways
            passages = manual_passages(plan.server, plan.token, plan.runs[-1].task_id)
            base = single.layout.django("plan", *[r.task_id for r in single.runs], env=_env(single))
            cut_numbers = cut_coverage_numbers(
                cut_way.server, cut_way.token, cut_way.runs[-1], passages
            )
            cut_stored = cut_way.layout.django(
                "plan", *[r.task_id for r in cut_way.runs], env=_env(cut_way)
            )
    finally:
        for way in ways:
            if way.server is not None:
                way.server.stop()
    return {
        "manual": {"pages": pages, "chars": chars, "cut_pages": cut_pages, "cut_chars": cut_chars},
        "ways": ways,
        "stored": stored,
        "baseline_stored": base,
        "passages": passages,
        "cut_numbers": cut_numbers,
        "cut_stored": cut_stored,
    }


def _env(way: Way) -> dict:
    return way.layout.environ()


def planned(stored: dict) -> bool:
    return any((task.get("plan") or {}).get("parts") for task in stored.values())


def lossless(run: Run, stored: dict) -> bool:
    """The streamed text of the task's last attempt is the text it saved: nothing lost or
    repeated on the way."""
    task = stored[run.task_id]
    return run.deltas.get(task["attempt"], "") == task["text"]


def report(measured: dict, slots: int) -> Results:
    results = Results("plan")
    plan, single, cut = measured["ways"]
    stored, base = measured["stored"], measured["baseline_stored"]
    manual = measured["manual"]
    results.note(
        f"manual: the first {manual['pages']} pages of the Nettle manual, "
        f"{manual['chars']:,} characters (pypdf's count); cut input: its first "
        f"{manual['cut_pages']} pages, {manual['cut_chars']:,} characters; {slots} slots"
    )
    cut_plans = [task["plan"] for task in measured["cut_stored"].values()]
    if any((p or {}).get("calls", 1) > 1 for p in cut_plans):
        results.note(f"the cut input was read in more than one call: {cut_plans}")
    plan_s = statistics.median(r.seconds for r in plan.runs)
    single_s = statistics.median(r.seconds for r in single.runs)
    results.add(
        "submit → result, plan on a 4,096-token window",
        plan_s,
        "s",
        baseline=single_s,
        target=f"≤ {TIME_TARGET} x one call",
        met=plan_s <= TIME_TARGET * single_s,
    )
    overheads = []
    for run in plan.runs:
        idle = idle_between(streams_of(plan.probe, run.task_id))
        planning = max(0.0, stored[run.task_id]["before_generate_ms"] / 1000 - _median_before(base))
        overheads.append((idle + planning) / run.seconds)
    overhead = statistics.median(overheads)
    results.add(
        "the plan's own time between calls, share of its total",
        100 * overhead,
        "%",
        target=f"≤ {100 * OVERHEAD_TARGET:.0f} %",
        met=overhead <= OVERHEAD_TARGET,
    )
    passages = measured["passages"]
    cited = {int(sid[1:]) for sid in plan.runs[-1].cited}
    for i, (whole, cut_share) in enumerate(
        zip(
            coverage(cited, len(passages)),
            coverage(measured["cut_numbers"], len(passages)),
            strict=True,
        )
    ):
        results.add(
            f"passages cited, third {i + 1} of the manual",
            100 * whole,
            "%",
            baseline=100 * cut_share,
            target="more than the cut report",
        )
    calls = [len(streams_of(plan.probe, r.task_id)) for r in plan.runs]
    results.data = {
        "manual": manual,
        "passages": len(passages),
        "seconds": {w.name: [r.seconds for r in w.runs] for w in (plan, single, cut)},
        "statuses": {w.name: [r.status for r in w.runs] for w in (plan, single, cut)},
        "calls_per_plan": calls,
        "plans": [stored[r.task_id]["plan"] for r in plan.runs],
        "overhead_shares": overheads,
        "lossless": [lossless(r, stored) for r in plan.runs],
        "cited": {"plan": sorted(cited), "cut": sorted(measured["cut_numbers"])},
    }
    return results


def _median_before(stored: dict) -> float:
    values = [t["before_generate_ms"] for t in stored.values()]
    return statistics.median(values) / 1000 if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    measured = measure(MANUAL_CHARS, args.runs, args.slots, args.timeout)
    if not planned(measured["stored"]):
        raise SystemExit("No plan of calls was made: this build cuts long documents.")
    results = report(measured, args.slots)
    results.show()
    print(f"saved {results.save()}")


if __name__ == "__main__":
    main()
