"""The invariants the fault soak (bench/chaos.py) judges, each as docs/lifecycle.md and
docs/api.md state it, over what the database holds (`bench.db audit`) and what the soak's
client saw. Each check returns the lines of its violations, and of the outcomes the docs
call legitimately unknown or explained, which it accepts and names."""

from __future__ import annotations

from dataclasses import dataclass, field

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "reconciliation_required"})
INCOMPLETE = TERMINAL - {"succeeded"}
# docs/providers.md: how a task of each scenario ends when nothing else happens to it.
EXPECTED = {
    "ok": ("succeeded", ""),
    "slow": ("succeeded", ""),
    "rate_limited": ("succeeded", ""),
    "error": ("failed", "provider_error"),
    "truncated": ("failed", "stream_truncated"),
    "empty": ("failed", "empty_output"),
    "stall": ("failed", "stalled"),
    "invalid": ("failed", "validation_failed"),
}
# docs/lifecycle.md: what a killed worker legitimately leaves: a task out of attempts, one
# lost while finalizing, or one whose documents were being read (blamed on them).
LOST = {("failed", "worker_lost"), ("failed", "invalid_input")}
NOTES = "Notes on the parts read so far"  # a plan's partial text (docs/lifecycle.md)


@dataclass
class Check:
    name: str
    checked: int = 0
    violations: list[str] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)


def judge(audit: dict, observed) -> list[Check]:
    tasks = audit["tasks"]
    ended = {i: t for i, t in tasks.items() if t["status"] in TERMINAL}
    return [
        ended_check(tasks),
        known_check(tasks, observed),
        events_check(ended),
        attempts_check(tasks, audit["max_attempts"]),
        texts_check(tasks),
        saved_check(ended),
        partial_check(ended, observed.bodies),
        cancels_check(tasks, observed.cancels),
        outcomes_check(ended, observed),
        money_check(tasks, audit["budgets"]),
        bodies_check(tasks, observed.bodies),
        replay_check(tasks, observed.replays),
        followers_check(tasks, observed.followed),
        stopped_workers_check(observed.stopped_workers),
    ]


# --- what a task's events and attempts say -------------------------------------------------


def deltas(task: dict, attempt: int) -> str:
    """The text attempt `attempt`'s delta events carried, in seq order."""
    return "".join(
        data.get("text", "")
        for _, kind, data in task["events"]
        if kind == "delta" and data.get("attempt") == attempt
    )


def current_attempt(task: dict) -> int:
    """The latest attempt that started or wrote text (reports.events.fold)."""
    return max(
        (
            data.get("attempt") or 0
            for _, kind, data in task["events"]
            if kind in ("delta", "progress") or (kind == "status" and data["status"] == "running")
        ),
        default=0,
    )


def terminal(task: dict) -> list:
    return [event for event in task["events"] if event[1] in TERMINAL]


# --- the checks -----------------------------------------------------------------------------


def ended_check(tasks: dict) -> Check:
    """Every task ended: after settling, no lease can still be legitimately held."""
    check = Check("every task ended, none stuck", len(tasks))
    for task_id, task in tasks.items():
        if task["status"] not in TERMINAL:
            check.violations.append(
                f"{task_id} {task['status']} (attempt {task['attempt_count']}, worker "
                f"{task['worker_id'] or '-'}, leased until {task['leased_until'] or '-'})"
            )
    return check


def known_check(tasks: dict, observed) -> Check:
    """Every task is one the client was given: an upload or retry sent again while the web
    process was down made no second task (its idempotency key)."""
    check = Check("no task made twice by a request sent again", len(tasks))
    for task_id in sorted(set(tasks) - set(observed.tasks)):
        check.violations.append(f"{task_id} was never answered to the client")
    return check


def events_check(ended: dict) -> Check:
    """Seqs 1…n with no gap, exactly one terminal event, the last, naming the status."""
    check = Check("events 1…n, one terminal, the last, as the status", len(ended))
    for task_id, task in ended.items():
        seqs = [seq for seq, _, _ in task["events"]]
        if seqs != list(range(1, len(seqs) + 1)) or len(seqs) != task["last_seq"]:
            check.violations.append(f"{task_id} seqs {compress(seqs)}, last_seq {task['last_seq']}")
        ends = terminal(task)
        if len(ends) != 1 or task["events"][-1] is not ends[-1]:
            kinds = [kind for _, kind, _ in ends]
            check.violations.append(f"{task_id} terminal events {kinds}, not one at the end")
        elif ends[0][1] != task["status"]:
            check.violations.append(f"{task_id} ended {ends[0][1]} but is {task['status']}")
    return check


def attempts_check(tasks: dict, max_attempts: int) -> Check:
    """Attempts 1…n, n within REPORTS_MAX_ATTEMPTS; every attempt of an ended task ended;
    no event names an attempt that did not start; none failed inside Reportline itself."""
    check = Check(f"attempts within the bound ({max_attempts}), all ended", len(tasks))
    for task_id, task in tasks.items():
        numbers = [a["number"] for a in task["attempts"]]
        if numbers != list(range(1, len(numbers) + 1)) or len(numbers) != task["attempt_count"]:
            check.violations.append(f"{task_id} attempts {numbers}")
        if len(numbers) > max_attempts:
            check.violations.append(f"{task_id} has {len(numbers)} attempts")
        named = {data.get("attempt") or 0 for _, _, data in task["events"]}
        if max(named, default=0) > len(numbers):
            check.violations.append(f"{task_id} events name attempt {max(named)} of {numbers}")
        for attempt in task["attempts"]:
            if task["status"] in TERMINAL and not attempt["ended"]:
                check.violations.append(f"{task_id} attempt {attempt['number']} never ended")
            if attempt["error_type"] == "worker_error":
                check.violations.append(
                    f"{task_id} attempt {attempt['number']} failed inside Reportline"
                )
    return check


def texts_check(tasks: dict) -> Check:
    """Each attempt keeps exactly the text its deltas carried (a plan's attempt with no
    report text yet keeps its notes instead: docs/lifecycle.md, "A plan of calls")."""
    check = Check("an attempt's text is its own deltas, nothing appended", len(tasks))
    for task_id, task in tasks.items():
        for attempt in task["attempts"]:
            if not attempt["ended"]:
                continue
            streamed = deltas(task, attempt["number"])
            if attempt["text"] == streamed:
                continue
            if not streamed and task["plan_calls"] and attempt["text"].startswith(NOTES):
                continue
            check.violations.append(
                f"{task_id} attempt {attempt['number']}: {len(attempt['text'])} characters "
                f"kept, {len(streamed)} streamed"
            )
    return check


def saved_check(ended: dict) -> Check:
    """A succeeded task's file exists with the sha256 and size its row records, and is
    its last attempt's text alone, settled (docs/api.md, "The text and the report"): the
    Sources section added, an earlier attempt's text not prepended."""
    succeeded = {i: t for i, t in ended.items() if t["status"] == "succeeded"}
    check = Check("a succeeded task's file as recorded, its last text", 0)
    check.checked = len(succeeded)
    for task_id, task in succeeded.items():
        result = task["result"]
        if not result:
            check.violations.append(f"{task_id} result {task['result_id']} is not in the store")
            continue
        if (result["sha256"], result["bytes"]) != (task["result_sha256"], task["result_bytes"]):
            check.violations.append(f"{task_id} file's sha256 and size differ from its row")
        last = task["attempts"][-1] if task["attempts"] else None
        if last is None or last["status"] != "succeeded":
            check.violations.append(f"{task_id} succeeded without a succeeded last attempt")
            continue
        body, sources, _ = result["text"].rpartition("\n## Sources\n")
        if not sources:
            check.violations.append(f"{task_id} report has no Sources section")
        elif last["removed_citations"] == 0 and body.rstrip() != last["text"].rstrip():
            check.violations.append(f"{task_id} report is not its last attempt's text")
        for earlier in task["attempts"][:-1]:
            head = earlier["text"][:60]
            if len(head) == 60 and result["text"].count(head) > 1:
                check.violations.append(
                    f"{task_id} report holds attempt {earlier['number']}'s text again"
                )
    return check


def partial_check(ended: dict, bodies: dict) -> Check:
    """A task that ended without a report after text arrived keeps it, marked partial:
    the terminal event's `partial`, the body's, and the text kept agree."""
    incomplete = {i: t for i, t in ended.items() if t["status"] in INCOMPLETE}
    check = Check("text kept, said partial, when a task ends unfinished", 0)
    check.checked = len(incomplete)
    for task_id, task in incomplete.items():
        last = task["attempts"][-1]["text"] if task["attempts"] else ""
        said = bool(terminal(task)[-1][2].get("partial")) if terminal(task) else None
        shown = (bodies.get(task_id) or {}).get("partial")
        if said != bool(last) or shown != bool(last):
            check.violations.append(
                f"{task_id} {task['status']}: {len(last)} characters kept, the "
                f"{task['status']} event says partial={said}, the body partial={shown}"
            )
    return check


def cancels_check(tasks: dict, cancels: list) -> Check:
    """A cancel acknowledged (202) stops the work: no attempt starts after it, and the
    task ends cancelled, unless it completed or failed first (docs/lifecycle.md, "Cancel
    against completion"); one refused says the task had ended (409)."""
    check = Check("a cancel acknowledged: no attempt after it", len(cancels))
    for cancel in cancels:
        task_id, task = cancel["task"], tasks.get(cancel["task"])
        if task is None or cancel["code"] not in (202, 409):
            check.violations.append(f"{task_id} cancel answered {cancel['code']}")
            continue
        if cancel["code"] == 409:
            continue
        named = {data.get("attempt") or 0 for _, _, data in task["events"]}
        later = sorted(n for n in named if n > cancel["attempts"])
        if later:
            check.violations.append(
                f"{task_id} cancel acknowledged while {cancel['status']} in attempt "
                f"{cancel['attempts']}; attempts {later} ran after it, the task ended "
                f"{task['status']} {task['error_type']}".rstrip()
            )
        elif task["status"] != "cancelled":
            check.accepted.append(
                f"{task_id} cancel acknowledged while {cancel['status']}; it ended "
                f"{task['status']} {task['error_type']} first".rstrip()
            )
    return check


def outcomes_check(ended: dict, observed) -> Check:
    """Each task ends as its scenario does (docs/providers.md), or as a fault explains:
    cancelled when it was cancelled, a worker lost (out of attempts, while finalizing, or
    while reading its documents)."""
    check = Check("each task ends as its scenario or a fault explains", len(ended))
    cancelled = {c["task"] for c in observed.cancels if c["code"] == 202}
    for task_id, task in ended.items():
        got = (task["status"], task["error_type"])
        scenario = task["scenario"]
        if got == EXPECTED.get(scenario) or (got == ("cancelled", "") and task_id in cancelled):
            continue
        if got in LOST:
            check.accepted.append(f"{task_id} {scenario}: {'/'.join(got)} (a worker lost)")
            continue
        if task["plan_calls"] and got[0] == "failed" and scenario != "ok":
            check.accepted.append(f"{task_id} {scenario} in a plan: {'/'.join(got)}")
            continue
        check.violations.append(f"{task_id} {scenario} ended {'/'.join(filter(None, got))}")
    return check


def money_check(tasks: dict, budgets: list) -> Check:
    """Nothing stays reserved for an ended task; money is held for an administrator only
    where an attempt's cost is unknown (docs/lifecycle.md, "Money at the end"); each
    budget's reserved and spent amounts are the sums of its tasks'."""
    check = Check("money: none held for an ended task but an unknown cost", len(tasks))
    for task_id, task in tasks.items():
        if task["status"] not in TERMINAL:
            continue
        status = task["cost_status"]
        unknown = [
            f"{a['number']} ({a['status']} {a['error_type']})".replace(" )", ")")
            for a in task["attempts"]
            if a["cost_micros"] is None
        ]
        if status == "reserved":
            check.violations.append(f"{task_id} {task['status']} still holds its reservation")
        elif status == "pending_reconciliation":
            line = f"{task_id} {task['status']} held for an administrator"
            if task["status"] == "reconciliation_required" or unknown:
                check.accepted.append(f"{line}: attempt {', '.join(unknown)} of unknown cost")
            else:
                check.violations.append(f"{line}, though every attempt's cost is known")
        elif task["reserved_micros"]:
            check.violations.append(f"{task_id} {status} with {task['reserved_micros']} reserved")
        elif status == "settled":
            costs = sum(a["cost_micros"] or 0 for a in task["attempts"])
            if task["cost_micros"] != costs:
                check.violations.append(
                    f"{task_id} charged {task['cost_micros']}, its attempts cost {costs}"
                )
    for budget in budgets:
        owned = [t for t in tasks.values() if t["owner_id"] == budget["user_id"]]
        held = sum(
            t["reserved_micros"]
            for t in owned
            if t["cost_status"] in ("reserved", "pending_reconciliation")
        )
        spent = sum(t["cost_micros"] or 0 for t in owned if t["cost_status"] == "settled")
        if (budget["reserved"], budget["spent"]) != (held, spent):
            check.violations.append(
                f"budget of user {budget['user_id']}: reserved {budget['reserved']}, spent "
                f"{budget['spent']}; its tasks hold {held} and were charged {spent}"
            )
    return check


def bodies_check(tasks: dict, bodies: dict) -> Check:
    """The API's task body says what the database holds."""
    check = Check("the API's task bodies agree with the database", len(tasks))
    for task_id, task in tasks.items():
        body = bodies.get(task_id)
        if body is None:
            check.violations.append(f"{task_id} GET /api/tasks/<id> did not answer 200")
            continue
        result = body["result"] or {}
        if (
            body["status"] != task["status"]
            or len(body["attempts"]) != task["attempt_count"]
            or body["cost_status"] != task["cost_status"]
            or (result.get("sha256"), result.get("bytes"))
            != ((task["result_sha256"], task["result_bytes"]) if result else (None, None))
            or (task["status"] == "succeeded") != bool(result)
        ):
            check.violations.append(f"{task_id} body {body['status']}, row {task['status']}")
    return check


def replay_check(tasks: dict, replays: dict) -> Check:
    """A replay from the first event gives exactly the stored events: over the event
    stream, each event as stored; over the WebSocket, each delta once, in order, closed
    with 1000 after the terminal event."""
    check = Check("replay from seq 0 (SSE, WebSocket): the stored events", 0)
    check.checked = len(replays)
    for task_id, replay in replays.items():
        stored = tasks[task_id]["events"]
        if replay["sse"] != stored:
            check.violations.append(f"{task_id} SSE replay {differ(replay['sse'], stored)}")
        ws = replay["ws"]
        got = [(seq, text) for _, _, items in ws["messages"] for seq, text in items]
        want = [(seq, data["text"]) for seq, kind, data in stored if kind == "delta"]
        if [seq for seq, _ in got] != [seq for seq, _ in want]:
            check.violations.append(
                f"{task_id} WebSocket delta seqs {compress([s for s, _ in got])}, stored "
                f"{compress([s for s, _ in want])}"
            )
        elif any(
            "\\" not in kept and text != kept
            for (_, text), (_, kept) in zip(got, want, strict=True)
        ):
            check.violations.append(f"{task_id} WebSocket delta text differs from the stored")
        if ws["error"] or ws["close_codes"] != [1000]:
            check.violations.append(f"{task_id} WebSocket {ws['error']} {ws['close_codes']}")
    return check


def followers_check(tasks: dict, followed: dict) -> Check:
    """A client that followed a task live, resuming after its last event whenever the
    connection dropped (a web process killed or stopped), got each event once, in order,
    as stored."""
    check = Check("live followers across restarts: no gap, no repeat", len(followed))
    for task_id, follower in followed.items():
        stored = tasks[task_id]["events"]
        if follower.error or follower.events != stored:
            check.violations.append(
                f"{task_id} after {follower.connects} connections "
                f"{follower.error or differ(follower.events, stored)}"
            )
    return check


def stopped_workers_check(stopped: list) -> Check:
    """A worker stopped by SIGTERM claims nothing more, lets its attempts end, and exits 0."""
    check = Check("a worker stopped by SIGTERM exits 0", len(stopped))
    for worker in stopped:
        if worker["exit"] != 0:
            check.violations.append(
                f"worker {worker['pid']} exit {worker['exit']} {worker['running_s']} s after"
            )
    return check


# --- wording --------------------------------------------------------------------------------


def compress(seqs: list[int]) -> str:
    """Say a list of numbers briefly: runs as a…b."""
    runs: list[list[int]] = []
    for n in seqs:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}…{b}" for a, b in runs) or "none"


def differ(got: list, stored: list) -> str:
    """Say where a list of events first differs from the stored one."""
    for i, (a, b) in enumerate(zip(got, stored, strict=False)):
        if a != b:
            return f"differs at #{i + 1}: got {a[:2]}, stored {b[:2]}"
    return f"has {len(got)} events, stored {len(stored)}"
