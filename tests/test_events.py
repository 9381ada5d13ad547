"""The event vocabulary: the fold's rules, and that no module but `reports/events.py`
builds an event by hand."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from reports import events
from reports.events import Draft, Event, Progress, fold

ROOT = Path(__file__).resolve().parents[1]
TASK = "7d1f0b4e-0000-4000-8000-000000000000"


def written(*drafts: tuple[int, Draft], start: int = 1) -> list[Event]:
    """Return the drafts as the writer commits them: numbered from `start`, each stamped
    with its attempt (the pair's first item)."""
    return [
        Event(TASK, seq, draft.type, draft.stamped(attempt))
        for seq, (attempt, draft) in enumerate(drafts, start=start)
    ]


# --- the fold ---------------------------------------------------------------------------


def test_a_task_with_no_event_is_queued_with_nothing_written():
    state = fold([])
    assert (state.seq, state.status, state.attempt, state.text) == (0, "queued", 0, "")
    assert not state.ended and state.terminal is None and state.progress is None


def test_the_status_is_the_latest_announced_and_text_does_not_change_it():
    state = fold(
        written(
            (0, events.status("queued")),
            (1, events.status("running")),
            (1, events.delta("Hello")),
            (1, events.status("finalizing")),
            (1, events.delta(" world")),
        )
    )
    assert (state.seq, state.status, state.status_seq) == (5, "finalizing", 4)
    assert state.text == "Hello world"


def test_a_new_attempt_replaces_the_text_and_keeps_the_earlier_one_as_its_own():
    state = fold(
        written(
            (1, events.status("running")),
            (1, events.delta("first try")),
            (1, events.requeued(retry_after_s=2.0, reason="rate_limited")),
            (2, events.status("running")),
        )
    )
    assert state.attempt == 2 and state.text == ""
    assert [(a.number, a.text) for a in state.earlier] == [(1, "first try")]
    fold(written((2, events.delta("second try")), start=5), state)
    assert state.text == "second try"
    assert [a.text for a in state.earlier] == ["first try"]


def test_an_attempt_without_text_leaves_nothing_earlier():
    state = fold(
        written(
            (1, events.status("running")),
            (1, events.requeued()),
            (2, events.status("running")),
            (2, events.delta("only")),
        )
    )
    assert state.earlier == [] and state.text == "only"


def test_a_requeue_says_why_it_waits():
    retry = fold(written((1, events.requeued(retry_after_s=2.5, reason="rate_limited"))))
    assert (retry.status, retry.status_attempt, retry.retry_after_s) == ("queued", 1, 2.5)
    assert retry.retried_for_error
    lost = fold(written((1, events.requeued())))
    assert lost.retry_after_s is None and not lost.retried_for_error


@pytest.mark.parametrize(
    ("end", "error_type", "message", "partial"),
    [
        (events.failed("timeout", "It timed out.", partial=True), "timeout", "It timed out.", True),
        (events.cancelled(partial=False), "", "", False),
        (events.reconciliation_required("Unknown.", partial=True), "", "Unknown.", True),
        (events.succeeded("r-1"), "", "", False),
    ],
)
def test_the_terminal_event_ends_the_task_and_says_how(end, error_type, message, partial):
    state = fold(written((1, events.status("running")), (1, events.delta("text")), (1, end)))
    assert state.ended and state.status == end.type
    assert state.terminal is not None
    assert (state.error_type, state.message, state.partial) == (error_type, message, partial)
    assert state.text == "text"  # what arrived is kept, whatever the end


def test_folding_is_incremental_and_skips_what_it_already_folded():
    stream = written(
        (1, events.status("running")),
        (1, events.delta("a")),
        (1, events.delta("b")),
        (1, events.succeeded("r")),
    )
    whole = fold(stream)
    state = fold(stream[:2])
    fold(stream[1:3], state)  # the second event again: a replay overlapping the live feed
    fold(stream[3:], state)
    assert state == whole and state.text == "ab"


def test_progress_belongs_to_the_current_attempt_and_never_goes_back():
    state = fold(
        written(
            (1, events.status("running")),
            (1, events.progress(1, 4, "part 1")),
            (1, events.progress(3, 4, "part 3")),
            (1, events.progress(2, 4, "part 2")),  # late: progress does not go back
        )
    )
    assert state.progress == Progress(3, 4, "part 3")
    assert state.status == "running"  # progress announces no status
    fold(written((1, events.requeued()), (2, events.status("running")), start=5), state)
    assert state.progress is None  # a new attempt starts from nothing
    fold(
        written((1, events.progress(4, 4, "late")), (2, events.progress(1, 4, "p")), start=7), state
    )
    assert state.progress == Progress(1, 4, "p")  # the replaced attempt's is ignored


def test_an_event_says_what_it_is_without_its_reader_spelling_keys():
    running, text, done = written(
        (1, events.status("running")), (1, events.delta("x")), (1, events.succeeded("r"))
    )
    assert running.starts_attempt and running.status == "running" and not running.is_terminal
    assert text.is_delta and text.text == "x" and text.status == "" and text.attempt == 1
    assert done.is_terminal and done.status == "succeeded" and done.text == ""
    assert Event.from_row(TASK, done.as_row()) == done


# --- writers only construct -------------------------------------------------------------

# Every key an event's data may carry, read off the constructors themselves, so that a key
# added to the vocabulary is guarded at once.
SAMPLES = [
    events.status("running"),
    events.requeued(retry_after_s=1.0, reason="rate_limited", resolved_by="admin"),
    events.delta("x"),
    events.progress(1, 2, "x"),
    events.succeeded("r"),
    events.failed("timeout", "m", partial=True, resolved_by="admin"),
    events.cancelled(partial=True),
    events.reconciliation_required("m", partial=True),
]
DATA_KEYS = frozenset(k for draft in SAMPLES for k in draft.stamped(1))
# Keys that name nothing but event data: a dict of event keys holding one of them is an
# event's data whatever it is passed to.
EVENT_ONLY_KEYS = frozenset({"partial", "result_id", "retry_after_s", "resolved_by"})
# The classes of an event; only the vocabulary and the one writer (the models, which
# build a row from a Draft) may make one, or store a `TaskEvent`.
BUILDERS = frozenset({"Draft", "Event", "TaskEvent"})
STORING = frozenset({"create", "bulk_create", "get_or_create", "update_or_create"})
WRITERS = frozenset({"transition", "append_event", "append_events", "end_task", "requeue_task"})
MAY_BUILD = frozenset({"reports/events.py", "reports/models/tasks.py"})
# The non-terminal types: terminal ones share their names with statuses, which code
# spells for other reasons.
PLAIN_TYPES = frozenset({events.STATUS, events.DELTA, events.PROGRESS})
# What a reader holds an event's data in.
DATA_HOLDERS = frozenset({"data", "status_data"})


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _root(node: ast.AST) -> str:
    """The name an attribute chain starts from (`TaskEvent` of `TaskEvent.objects.create`)."""
    while isinstance(node, ast.Attribute | ast.Call):
        node = node.value if isinstance(node, ast.Attribute) else node.func
    return _name(node)


def _vocabulary_names(tree: ast.Module) -> set[str]:
    """The event classes a module imports from the app, and the module names it holds
    the vocabulary under (an `asyncio.Event` is no event of ours)."""
    names = {"events"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("reports"):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _builder(func: ast.AST, ours: set[str]) -> str:
    """The event class `func` names when it is one of ours, else ""."""
    # `Event` alone is a common name (asyncio's, threading's): ours only when imported.
    if (
        isinstance(func, ast.Name)
        and func.id in BUILDERS
        and (func.id != "Event" or "Event" in ours)
    ):
        return func.id
    if isinstance(func, ast.Attribute) and func.attr in BUILDERS and _root(func) in ours:
        return func.attr
    if isinstance(func, ast.Attribute) and func.attr in STORING and _root(func) == "TaskEvent":
        return "TaskEvent"
    return ""


def _keys(node: ast.Dict) -> set[str]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _event_data(node: ast.Dict) -> bool:
    keys = _keys(node)
    return bool(keys) and keys <= DATA_KEYS and bool(keys & EVENT_ONLY_KEYS)


def _type_literal(node: ast.AST, types: frozenset[str] = events.TYPES) -> bool:
    return isinstance(node, ast.Constant) and node.value in types


def hand_built(source: str, path: str) -> list[str]:
    """Return where `source` builds an event's type or data, or reads its keys, by hand."""
    found = []
    tree = ast.parse(source)
    ours = _vocabulary_names(tree)
    for node in ast.walk(tree):
        line = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Dict) and _event_data(node):
            found.append(f"{line} event data written out: {sorted(_keys(node))}")
        elif isinstance(node, ast.Call):
            built = _builder(node.func, ours)
            if built and path not in MAY_BUILD:
                found.append(f"{line} {built} built outside the vocabulary")
            callee = built or _name(node.func)
            arguments = [*node.args, *(k.value for k in node.keywords)]
            if callee in BUILDERS | WRITERS:
                for arg in arguments:
                    if _type_literal(arg, PLAIN_TYPES) or isinstance(arg, ast.Dict):
                        found.append(f"{line} {callee}(...) given a hand-made type or data")
            for keyword in node.keywords:
                if (keyword.arg or "").split("__")[0] == "type" and _literal_types(keyword.value):
                    found.append(f"{line} event type spelled in a query: {keyword.arg}=")
            if (
                callee == "get"
                and isinstance(node.func, ast.Attribute)
                and _name(node.func.value) in DATA_HOLDERS
                and node.args
                and _type_literal(node.args[0], DATA_KEYS)
            ):
                found.append(f"{line} event data read by key: .get({node.args[0].value!r})")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_name(s) == "type" for s in sides) and any(_literal_types(s) for s in sides):
                found.append(f"{line} event type compared with a literal")
        elif (
            isinstance(node, ast.Subscript)
            and _name(node.value) in DATA_HOLDERS
            and _type_literal(node.slice, DATA_KEYS)
        ):
            found.append(f"{line} event data read by key: [{node.slice.value!r}]")
    return found


def _literal_types(node: ast.AST) -> bool:
    """A literal event type, or a literal collection of them."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return any(_type_literal(e) for e in node.elts)
    return _type_literal(node)


def test_no_module_but_the_vocabulary_builds_or_reads_an_event_by_hand():
    found = []
    for package in ("reports", "project"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative == "reports/events.py" or "/migrations/" in relative:
                continue
            found += hand_built(path.read_text(), relative)
    assert found == []


PLANTED = {
    "a terminal payload": 'data = {"error_type": kind, "partial": True, "message": m}',
    "a requeue's data": 'Task.objects.transition(t, frm, to, event=x, extra={"retry_after_s": 2})',
    "a hand-made draft": 'end_task(t, "running", Draft("failed", data))',
    "a literal type to a writer": 'Task.objects.append_event(t, epoch, "delta", data)',
    "a row built by hand": "from reports.models import Event\nEvent(task_id, seq, kind, d)",
    "a row with a literal": 'events.Event(task_id, seq, "delta", {"text": t})',
    "a stored event by hand": "TaskEvent.objects.create(task_id=t, seq=1, type=kind, data=d)",
    "a literal type in a query": 'TaskEvent.objects.filter(task_id=t).exclude(type="delta")',
    "types in a query": 'TaskEvent.objects.filter(type__in=["status", "failed"])',
    "a type compared": 'if event.type == "delta":\n    pass',
    "a key read": 'number = int(event.data.get("attempt") or 0)',
    "a key subscripted": 'partial = status_data["partial"]',
}


@pytest.mark.parametrize("source", PLANTED.values(), ids=PLANTED.keys())
def test_the_guard_catches_a_planted_regression(source):
    assert hand_built(source, "reports/somewhere.py") != []


def test_the_guard_leaves_other_dictionaries_and_statuses_alone():
    source = inspect.cleandoc(
        """
        body = {"task_id": t, "status": task.status, "partial": False, "error": None}
        result = {"result_id": r, "download_url": u, "sha256": s}
        ended = {"status": s, "error_type": e, "retry_after_s": r, "text": t, "stage_ms": m}
        failed = events.failed(e, m, partial=True)
        Task.objects.transition(t, Status.RUNNING, Status.FAILED, event=failed)
        stopping = asyncio.Event()
        Task.objects.filter(status="failed")
        probe = {"status": "ok"}
        """
    )
    assert hand_built(source, "reports/somewhere.py") == []
