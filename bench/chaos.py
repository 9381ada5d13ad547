"""A fault soak: reports run through one web and two worker processes while their
processes are killed, stopped and restarted and their tasks cancelled and retried at
random; then every promise of docs/lifecycle.md and docs/api.md a fault could break is
checked from the database and the API (bench/chaos_checks.py).

    python -m bench.chaos [--duration 120] [--seed 0] [--settle 300]

The layout: SQLite in a scratch directory, the web process under uvicorn with no
embedded worker, two `reportworker` processes of four slots (bench/harness.py), the
simulated provider and its scenarios, a 4,096-token window so that the longer document
is read in a plan of calls. For `--duration` seconds tasks are submitted over the API (a
document and a scenario drawn at random; a third followed live over the event stream,
which resumes after each drop), and every one to four seconds a fault is drawn: a worker
killed (SIGKILL) and another started, a worker stopped (SIGTERM, left to finish what it
runs) and another started, a running task cancelled (and at times a worker killed at
once, before the cancel reaches its runner), an ended task retried, the web process
killed or stopped and started again on its port. Then the faults stop, every
task is given `--settle` seconds to end, a few tasks are replayed from their first event
over the event stream and the WebSocket, and the invariants are judged.

The seed draws the documents, the scenarios and the faults; where a fault lands in a
task's life is the machine's timing, so a run is not repeated exactly: a finding becomes
a test of its own. Not part of the test run. Exit 0 when every invariant held, 1 when one
did not (its row, and the violations under the table, say which).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import http.client
import json
import os
import random
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

from bench import chaos_checks, wsclient
from bench.harness import ROOT, SAMPLE, Layout, Process, Results, scratch_dir, serve, work

CORPUS = ROOT / "tests" / "fixtures" / "corpus"
SLOTS = 4  # a worker's
WORKERS = 2
SERVER = "uvicorn"  # the production web server (docs/production.md)
ENV = {
    "REPORTS_EMBEDDED_WORKER": "0",
    "REPORTS_ALLOW_SCENARIOS": "1",
    # A window of 4,096 tokens: the 17,000-character document is a plan of three calls.
    "REPORTS_CONTEXT_TOKENS": "4096",
    "REPORTS_MAX_OUTPUT_TOKENS": "1024",
    "REPORTS_SIMULATED_TTFT_S": "0.3",
    "REPORTS_SIMULATED_TOKENS_PER_S": "80",  # a report streams for about ten seconds
    "REPORTS_STALL_TIMEOUT_S": "5",
    "REPORTS_LEASE_S": "10",
    "REPORTS_DRAIN_S": "3",
    "REPORTS_MAX_RUNNING": str(SLOTS * WORKERS),
    "REPORTS_LANE_LIMITS": f"short={SLOTS * WORKERS},long=2",
    "REPORTS_QUEUE_LIMIT": "1000",
}
DOCUMENTS = (  # name, path, content type, whether its window makes it a plan of calls
    ("article.md", SAMPLE, "text/markdown", False),
    ("markdown-it-py-README.md", CORPUS / "markdown-it-py-README.md", "text/markdown", False),
    ("flextypegood.txt", CORPUS / "sqlite-flextypegood.txt", "text/plain", True),
)
SCENARIOS = {  # docs/providers.md: scenario → weight
    "ok": 6,
    "slow": 1,
    "error": 1,
    "truncated": 1,
    "empty": 1,
    "stall": 1,
    "rate_limited": 2,
    "invalid": 1,
}
PLAN_SCENARIOS = {"ok": 3, "error": 1}
FAULTS = {  # fault → weight
    "kill_worker": 3,
    "stop_worker": 2,
    "cancel": 3,
    "cancel_and_kill": 2,  # a worker dies while a cancel is on its way to its runner
    "retry": 2,
    "restart_web": 1,
}
IN_FLIGHT = 16  # unfinished tasks past which no more are submitted for now
FOLLOWED_SHARE = 1 / 3
REPLAYS = 8
TERMINAL = chaos_checks.TERMINAL
# A server down or going: refused, reset or timed out (OSErrors, URLError among them), or
# an answer cut off.
DOWN = (OSError, http.client.HTTPException)


class Api:
    """The soak's client: one token's requests, sent again while the web process is down.
    Every POST it sends is safe to send again: an upload or retry under its idempotency
    key, or a cancel."""

    def __init__(self, base_url: str, token: str, patience_s: float = 90) -> None:
        self.base_url, self.patience_s = base_url, patience_s
        self.headers = {"Authorization": f"Bearer {token}"}
        self.resent = 0

    def request(self, method: str, path: str, **headers) -> urllib.request.Request:
        data = b"" if method == "POST" else None
        return urllib.request.Request(
            self.base_url + path, data=data, method=method, headers={**self.headers, **headers}
        )

    def call(self, request: urllib.request.Request) -> tuple[int, dict | None]:
        """Send `request` until it is answered (a 503 is a web process stopping); return
        the status and the JSON body."""
        deadline = time.monotonic() + self.patience_s
        while True:
            try:
                with urllib.request.urlopen(request, timeout=30) as reply:
                    return reply.status, _json(reply.read())
            except urllib.error.HTTPError as error:
                body = _json(error.read())
                if error.code != 503 or time.monotonic() > deadline:
                    return error.code, body
            except DOWN:
                if time.monotonic() > deadline:
                    raise
            self.resent += 1
            time.sleep(0.25)

    def get(self, path: str) -> tuple[int, dict | None]:
        return self.call(self.request("GET", path))

    def post(self, path: str, **headers) -> tuple[int, dict | None]:
        return self.call(self.request("POST", path, **headers))


def _json(raw: bytes) -> dict | None:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


class System:
    """The processes under test, and the faults done to them."""

    def __init__(self, layout: Layout, env: dict) -> None:
        self.layout, self.env = layout, env
        self.started = 0  # worker processes, for their logs' names
        self.web = serve(layout, env, server=SERVER)
        self.workers = [self._worker() for _ in range(WORKERS)]
        self.stopping: list[tuple[Process, float]] = []  # SIGTERMed, with when
        self.web.wait_ready()

    def _worker(self) -> Process:
        self.started += 1
        return work(self.layout, self.env, slots=SLOTS, index=self.started)

    def kill_worker(self, rng: random.Random) -> str:
        victim = self.workers.pop(rng.randrange(len(self.workers)))
        os.killpg(victim.popen.pid, signal.SIGKILL)  # its document readers with it
        victim.popen.wait(timeout=30)
        self.workers.append(self._worker())
        return f"worker {victim.popen.pid}"

    def stop_worker(self, rng: random.Random) -> str:
        victim = self.workers.pop(rng.randrange(len(self.workers)))
        victim.popen.send_signal(signal.SIGTERM)  # to the worker alone, as a supervisor does
        self.stopping.append((victim, time.monotonic()))
        self.workers.append(self._worker())
        return f"worker {victim.popen.pid}"

    def restart_web(self, rng: random.Random) -> str:
        how = rng.choice((signal.SIGKILL, signal.SIGTERM))
        old = self.web
        old.popen.send_signal(how)
        try:
            old.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            old.popen.kill()
            old.popen.wait(timeout=10)
        self.web = serve(self.layout, self.env, server=SERVER, port=old.port)
        self.web.wait_ready()
        return f"{how.name}, {old.popen.pid} → {self.web.popen.pid}"

    def stopped_workers(self) -> list[dict]:
        """Each SIGTERMed worker: how long it took to stop and its exit status (None: it
        has not stopped)."""
        return [
            {
                "pid": p.popen.pid,
                "exit": p.popen.poll(),
                "running_s": round(time.monotonic() - at, 1),
            }
            for p, at in self.stopping
        ]

    def stop(self) -> None:
        for process, _ in self.stopping:
            if process.popen.poll() is None:
                os.killpg(process.popen.pid, signal.SIGKILL)
        for process in [self.web, *self.workers]:
            process.stop()

    def logs(self) -> str:
        return "".join(path.read_text() for path in self.layout.data_dir.glob("*.log"))


@dataclass
class Followed:
    """What a live follower of a task's event stream received, across its reconnects."""

    events: list = field(default_factory=list)  # [seq, type, data]
    connects: int = 0
    error: str = ""


@dataclass
class Observed:
    """What the soak's client saw: what the invariants are judged against besides the
    database."""

    tasks: dict = field(default_factory=dict)  # id → {"scenario", "document", "via"}
    cancels: list = field(default_factory=list)  # {"task", "code", "status", "attempts"}
    faults: list = field(default_factory=list)  # [seconds into the run, fault, detail]
    followed: dict = field(default_factory=dict)  # id → Followed
    bodies: dict = field(default_factory=dict)  # id → the task body after settling
    replays: dict = field(default_factory=dict)  # id → {"sse": [...], "ws": {...}}
    refused: dict = field(default_factory=dict)  # submission status → count
    stopped_workers: list = field(default_factory=list)


class Soak:
    def __init__(self, system: System, api: Api, user: dict, seed: int) -> None:
        self.system, self.api, self.user = system, api, user
        self.faults_rng, self.load_rng = random.Random(seed), random.Random(seed + 1)
        self.observed = Observed()
        self.statuses: dict[str, str] = {}  # the newest tasks' statuses, as last listed
        self.stop_load = threading.Event()
        self.stop_followers = threading.Event()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.started = time.monotonic()

    # --- load -----------------------------------------------------------------------------

    def submit(self) -> None:
        name, path, content_type, plan = self.load_rng.choice(DOCUMENTS)
        mix = PLAN_SCENARIOS if plan else SCENARIOS
        scenario = self.load_rng.choices(list(mix), weights=list(mix.values()))[0]
        key = f"chaos-{self.load_rng.getrandbits(64):016x}"
        request = wsclient.upload_request(
            self.api.base_url,
            self.user["token"],
            name,
            path.read_bytes(),
            content_type,
            fields={"scenario": scenario},
            key=key,
        )
        status, body = self.api.call(request)
        self.created(status, body, scenario=scenario, document=name, via="upload")

    def created(self, status: int, body: dict | None, **record) -> None:
        if status not in (200, 201) or body is None:
            with self.lock:
                self.observed.refused[status] = self.observed.refused.get(status, 0) + 1
            return
        task_id = body["task_id"]
        with self.lock:  # a retry's answer may replay a task the submitter made
            self.observed.tasks.setdefault(task_id, record)
            self.statuses.setdefault(task_id, body["status"])
            followed = None
            if task_id not in self.observed.followed and self.load_rng.random() < FOLLOWED_SHARE:
                self.observed.followed[task_id] = followed = Followed()
        if followed is not None:
            self._thread(self.follow, task_id, followed)

    def submitting(self) -> None:
        while not self.stop_load.wait(self.load_rng.uniform(0.3, 1.2)):
            with self.lock:
                unfinished = sum(s not in TERMINAL for s in self.statuses.values())
            if unfinished < IN_FLIGHT:
                self.submit()

    def listing(self) -> None:
        """Keep the statuses of the newest tasks (the API's first two pages) at hand."""
        while not self.stop_followers.wait(1.0):
            for page in (1, 2):
                try:
                    status, body = self.api.get(f"/api/tasks?page={page}")
                except DOWN:
                    continue
                if status == 200:
                    with self.lock:
                        self.statuses.update({t["task_id"]: t["status"] for t in body["tasks"]})

    def follow(self, task_id: str, followed: Followed) -> None:
        """Follow the task's event stream to its terminal event, resuming after the last
        event received whenever the connection drops (a web process killed or stopped)."""
        while not self.stop_followers.is_set():
            after = followed.events[-1][0] if followed.events else 0
            request = self.api.request(
                "GET", f"/api/tasks/{task_id}/events", **{"Last-Event-ID": str(after)}
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as stream:
                    followed.connects += 1
                    if stream.status == 204:
                        return
                    for event in read_events(stream):
                        followed.events.append(event)
                        if event[1] in TERMINAL:
                            return
            except urllib.error.HTTPError as error:
                if error.code != 503:
                    followed.error = f"HTTP {error.code}"
                    return
            except DOWN:
                pass
            time.sleep(0.2)
        followed.error = "did not reach its terminal event"

    def _thread(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self.threads.append(thread)

    # --- faults ---------------------------------------------------------------------------

    def fault(self) -> None:
        kind = self.faults_rng.choices(list(FAULTS), weights=list(FAULTS.values()))[0]
        detail = getattr(self, f"_{kind}")()
        at = round(time.monotonic() - self.started, 1)
        self.observed.faults.append([at, kind, detail])
        print(f"{at:7.1f} s  {kind:15s} {detail}", flush=True)

    def _kill_worker(self) -> str:
        return self.system.kill_worker(self.faults_rng)

    def _stop_worker(self) -> str:
        return self.system.stop_worker(self.faults_rng)

    def _restart_web(self) -> str:
        return self.system.restart_web(self.faults_rng)

    def _pick(self, statuses) -> str | None:
        with self.lock:
            found = sorted(t for t, s in self.statuses.items() if s in statuses)
        return self.faults_rng.choice(found) if found else None

    def _cancel(self) -> str:
        task_id = self._pick({"running"}) or self._pick({"queued"})
        if task_id is None:
            return "nothing to cancel"
        status, body = self.api.post(f"/api/tasks/{task_id}/cancel")
        self.observed.cancels.append(
            {
                "task": task_id,
                "code": status,
                "status": (body or {}).get("status"),
                "attempts": len((body or {}).get("attempts") or ()),
            }
        )
        return f"{task_id} → {status} {(body or {}).get('status', '')}"

    def _cancel_and_kill(self) -> str:
        """Cancel a running task and kill a worker at once, before a runner in another
        process reads the cancel (at its next chunk write or lease renewal): half the
        time the one that holds the task."""
        return f"{self._cancel()}; {self._kill_worker()}"

    def _retry(self) -> str:
        task_id = self._pick(TERMINAL)
        if task_id is None:
            return "nothing ended yet"
        key = f"chaos-{self.faults_rng.getrandbits(64):016x}"
        status, body = self.api.post(f"/api/tasks/{task_id}/retry", **{"Idempotency-Key": key})
        record = self.observed.tasks.get(task_id, {})
        self.created(status, body, **{**record, "via": f"retry of {task_id}"})
        return f"{task_id} → {status} {(body or {}).get('task_id', '')}"

    # --- the run --------------------------------------------------------------------------

    def run(self, duration_s: float) -> None:
        self._thread(self.submitting)
        self._thread(self.listing)
        end = self.started + duration_s
        while time.monotonic() + 1 < end:
            time.sleep(min(self.faults_rng.uniform(1, 4), max(0.0, end - time.monotonic())))
            self.fault()
        self.stop_load.set()

    def settle(self, settle_s: float) -> float:
        """Wait until every task ended, at most `settle_s`; return the seconds it took."""
        start = time.monotonic()
        pending = set(self.observed.tasks)
        while pending and time.monotonic() - start < settle_s:
            for task_id in sorted(pending):
                status, body = self.api.get(f"/api/tasks/{task_id}")
                if status == 200 and body["status"] in TERMINAL:
                    pending.discard(task_id)
            if pending:
                time.sleep(1.0)
        # The followers of ended tasks have their terminal events by now, or soon.
        deadline = time.monotonic() + 30
        for thread in self.threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self.stop_followers.set()
        return time.monotonic() - start

    def read_back(self) -> None:
        """Every task's body, and a replay from the first event of a few of them over
        the event stream and the WebSocket."""
        for task_id in self.observed.tasks:
            status, body = self.api.get(f"/api/tasks/{task_id}")
            if status == 200:
                self.observed.bodies[task_id] = body
        chosen = self.faults_rng.sample(
            sorted(self.observed.tasks), min(REPLAYS, len(self.observed.tasks))
        )
        for task_id in chosen:
            self.observed.replays[task_id] = {
                "sse": self.replay_events(task_id),
                "ws": self.replay_socket(task_id),
            }
        self.observed.stopped_workers = self.system.stopped_workers()

    def replay_events(self, task_id: str) -> list:
        request = self.api.request("GET", f"/api/tasks/{task_id}/events")
        with urllib.request.urlopen(request, timeout=30) as stream:
            return list(read_events(stream))

    def replay_socket(self, task_id: str) -> dict:
        base = self.api.base_url
        stream = wsclient.Stream(task_id)
        headers = {"Origin": base, "Cookie": f"sessionid={self.user['cookie']}"}
        url = f"{base.replace('http', 'ws', 1)}/ws/tasks/{task_id}/?after=0"
        try:
            asyncio.run(asyncio.wait_for(wsclient.follow(stream, url, headers), 30))
        except Exception as exc:  # judged as a replay that failed
            stream.error = repr(exc)
        # A copy: a stream's own __dict__ was seen emptied once the stream was collected.
        return dataclasses.asdict(stream)


def read_events(stream) -> Iterator[list]:
    """Yield each event of an event stream as [seq, type, data], in order."""
    seq = kind = None
    for raw in stream:
        line = raw.decode().rstrip("\n")
        if line.startswith("id: "):
            seq = int(line[4:])
        elif line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: ") and kind is not None:
            yield [seq, kind, json.loads(line[6:])]
            seq = kind = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=120, help="seconds of faults")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settle", type=float, default=300, help="most seconds to wait for ends")
    args = parser.parse_args()

    layout = Layout("scale-out", scratch_dir(), {"DATABASE_URL": "", "REDIS_URL": ""})
    env = layout.environ(**ENV)
    user = layout.django("prepare", env=env)
    system = System(layout, env)
    soak = Soak(system, Api(system.web.url, user["token"]), user, args.seed)
    try:
        soak.run(args.duration)
        settled_s = soak.settle(args.settle)
        soak.read_back()
    finally:
        system.stop()
    audit = layout.django("audit", env=env)
    results = report(args, soak.observed, audit, settled_s, soak.api.resent, system.logs())
    results.show()
    print(f"saved {results.save()}")
    raise SystemExit(0 if all(row.met for row in results.rows if row.met is not None) else 1)


def report(args, observed: Observed, audit: dict, settled_s: float, resent: int, logs: str):
    """Judge the run: one row per invariant (violations, target 0), then what was done."""
    results = Results("chaos")
    checks = chaos_checks.judge(audit, observed)
    for check in checks:
        results.add(
            check.name,
            len(check.violations),
            f"/{check.checked}",
            target="0 violations",
            met=not check.violations,
        )
    faults: dict[str, int] = {}
    for _, kind, _ in observed.faults:
        faults[kind] = faults.get(kind, 0) + 1
    statuses: dict[str, int] = {}
    for task in audit["tasks"].values():
        statuses[task["status"]] = statuses.get(task["status"], 0) + 1
    results.add("tasks", len(audit["tasks"]))
    for status, count in sorted(statuses.items()):
        results.add(f"  {status}", count)
    results.add("faults", len(observed.faults))
    for kind, count in sorted(faults.items()):
        results.add(f"  {kind}", count)
    results.add("seconds to settle", settled_s, "s")
    results.add("requests sent again (web down)", resent)
    results.add("Tracebacks in the processes' logs", logs.count("Traceback"))
    for check in checks:
        for line in check.violations:
            results.note(f"VIOLATION {check.name}: {line}")
        for line in check.accepted:
            results.note(f"accepted  {check.name}: {line}")
    results.data = {
        "seed": args.seed,
        "duration_s": args.duration,
        "faults": observed.faults,
        "cancels": observed.cancels,
        "refused": observed.refused,
        "stopped_workers": observed.stopped_workers,
        "violations": {c.name: c.violations for c in checks if c.violations},
    }
    return results


if __name__ == "__main__":
    main()
