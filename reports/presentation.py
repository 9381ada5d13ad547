"""What the pages say about a task: status wording, wait estimates, the page snapshot.

Read-only: everything here reads tasks, attempts and events and puts them in words; the
pages and the WebSocket consumer call it, and nothing here writes.

A page is a snapshot at one seq: the task row and every event up to its `last_seq`
(both are written in the same transaction, so the pair is always consistent). The
live stream then continues after that seq.
"""

from __future__ import annotations

import functools
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import (
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Subquery,
    Sum,
    prefetch_related_objects,
)
from django.db.models.functions import Coalesce, Now

from reports import budgets, events, rendering, wording
from reports.events import AttemptText, TaskState
from reports.exports import html, language
from reports.models import (
    TERMINAL,
    Attempt,
    CompiledRead,
    CostStatus,
    ErrorType,
    Held,
    PlanCall,
    ProviderCircuit,
    SourcePassage,
    Status,
    Task,
    TaskEvent,
    at_cap_parameters,
    live_lease_parameters,
)
from reports.parsers import planning
from reports.providers import concurrency, table_facts
from reports.providers.base import CHARS_PER_TOKEN
from reports.serving import download_names

# A passage id as a citation names it; nine digits at most stay inside the column's range.
PASSAGE_ID = re.compile(r"S([1-9]\d{0,8})")
WAIT_SAMPLE = 20  # succeeded tasks of the lane that the wait estimate is based on

LABELS = {
    Status.QUEUED: "Queued",
    Status.RUNNING: "Running",
    Status.FINALIZING: "Finalizing",
    Status.SUCCEEDED: "Succeeded",
    Status.FAILED: "Failed",
    Status.CANCELLED: "Cancelled",
    Status.RECONCILIATION_REQUIRED: "Outcome unknown",
}

# --- status --------------------------------------------------------------------------

_STATUS, _NUMBER = Task._meta.get_field("status"), IntegerField()


def seconds_a_place(lane: str) -> float | None:
    """Return the wait each place in the lane's line adds, to estimate a queued task's:
    the median run time of the lane's recent reports over its slots (the lane's, or fewer
    when the provider runs fewer calls at once).

    None when the lane has no finished report to learn from yet.
    """
    rows = _RECENT_RUNS.rows(lane)
    durations = [(done - claimed).total_seconds() for claimed, done in rows if done]
    if not durations:
        return None
    slots = settings.REPORTS_LANE_LIMITS.get(lane, 1)
    if (provider_limit := concurrency.limit()) is not None:
        slots = min(slots, provider_limit)
    return statistics.median(durations) / max(1, slots)


# Every queued page's status line reads these two: compiled once (reports.models.compiled).
_RECENT_RUNS = CompiledRead(
    lambda lane: (
        Task.objects.filter(lane=lane, status=Status.SUCCEEDED, claimed_at__isnull=False)
        .order_by("-finished_at")
        .values_list("claimed_at", "finished_at")[:WAIT_SAMPLE]
    ),
    lambda lane: [(Task._meta.get_field("lane"), lane), (_STATUS, Status.SUCCEEDED)],
)


def _ahead_of_others(task_id):
    """The queued task's owner's live leases (`running`), and whether another owner's
    task waits in its lane for the claim to take it first (`waiting`)."""
    mine = Task.objects.live_leases().filter(owner_id=OuterRef("owner_id"))
    others = Task.objects.filter(status=Status.QUEUED, lane=OuterRef("lane")).exclude(
        owner_id__in=Task.objects.at_cap()
    )
    return (
        Task.objects.filter(pk=task_id)
        .annotate(
            running=Coalesce(
                Subquery(mine.values("owner_id").annotate(n=Count("pk")).values("n")), 0
            ),
            waiting=Exists(others),
        )
        .values_list("running", "waiting")[:1]
    )


_AHEAD_OF_OTHERS = CompiledRead(
    _ahead_of_others,
    lambda task_id: [
        *live_lease_parameters(),
        (_NUMBER, 0),  # Coalesce(count, 0)
        (_NUMBER, 1),  # Exists: SELECT 1
        (_STATUS, Status.QUEUED),
        *at_cap_parameters(),
        (Task._meta.pk, task_id),
    ],
)


def submitted_elapsed_ms(task_id) -> int:
    """Milliseconds since the task was submitted, on the database's clock: a new attempt
    (a retry, a restart) does not start the count again."""
    elapsed = (
        Task.objects.filter(pk=task_id)
        .annotate(elapsed=ExpressionWrapper(Now() - F("created_at"), output_field=DurationField()))
        .values_list("elapsed", flat=True)
        .first()
    )
    return _ms(elapsed)


def _ms(elapsed) -> int:
    return 0 if elapsed is None else max(0, int(elapsed.total_seconds() * 1000))


def restarted_words(task_id, attempt: int) -> str:
    """Say plainly that attempt `attempt` starts again because the one before it was cut
    off by a lost server or worker: from nothing, or from the notes a plan of calls had
    written (they are kept); "" when it was not."""
    lost = Attempt.objects.filter(
        task_id=task_id, number=attempt - 1, error_type=ErrorType.WORKER_LOST
    ).exists()
    if not lost:
        return ""
    kept = PlanCall.objects.filter(task_id=task_id, status=PlanCall.CallStatus.SUCCEEDED).exists()
    return wording.restarted(embedded=settings.REPORTS_EMBEDDED_WORKER, notes_kept=kept)


def running_times(task_id, attempt: int) -> tuple[int, Any]:
    """Return the milliseconds since the task was submitted (`submitted_elapsed_ms`) and
    when the running attempt started, in one query."""
    row = _RUNNING_TIMES.first(task_id, attempt)
    if row is None:
        return submitted_elapsed_ms(task_id), None
    return _ms(row[0]), row[1]


# Every page of a running task reads it: compiled once (reports.models.compiled).
_RUNNING_TIMES = CompiledRead(
    lambda task_id, attempt: (
        Attempt.objects.filter(task_id=task_id, number=attempt)
        .annotate(
            elapsed=ExpressionWrapper(Now() - F("task__created_at"), output_field=DurationField())
        )
        .values_list("elapsed", "started_at")[:1]
    ),
    lambda task_id, attempt: [
        (Attempt._meta.get_field("number"), attempt),  # the ORM's order: by name
        (Attempt._meta.get_field("task"), task_id),
    ],
)


def waiting_context(started_at) -> dict[str, Any]:
    """What the status line says while the attempt waits for its first text: since when,
    and when it gives up (no answer, or an answer and no text)."""
    return {
        "since": started_at,
        "response_s": settings.REPORTS_PROVIDER_RESPONSE_TIMEOUT_S,
        "stall_s": settings.REPORTS_STALL_TIMEOUT_S,
    }


def duration_words(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    if seconds < 90:
        return f"about {round(seconds)} s"
    return f"about {round(seconds / 60)} min"


def status_context(
    task: Task, state: TaskState, *, has_text: bool = False, queue_reads: QueueReads | None = None
) -> dict[str, Any]:
    """Return what the status line shows for the task's folded `state`.

    `has_text` says whether the running attempt has written text yet (the page updates
    that stage itself). `queue_reads` says how a queued line reads what it shares with
    the other queued tasks' (afresh unless told).
    """
    value = state.status
    attempt = state.status_attempt
    context: dict[str, Any] = {
        "value": value,
        "label": LABELS.get(value, value),
        "detail": "",
        "attempt": attempt,
        "elapsed_ms": None,
        "stage": "",
        "progress": None,
        "reading": None,
        "waiting": None,
    }
    if value == Status.QUEUED:
        context["detail"] = _queued_detail(task, state, queue_reads or FRESH)
        if attempt:  # going again: the time since submit goes on counting
            context["elapsed_ms"] = submitted_elapsed_ms(task.pk)
    elif value == Status.RUNNING:
        if attempt > 1:
            context["detail"] = restarted_words(task.pk, attempt) or "trying again"
        context["stage"] = "writing" if has_text else "waiting"
        context["elapsed_ms"], started_at = running_times(task.pk, attempt)
        if not has_text:
            context["waiting"] = waiting_context(started_at)
        if state.progress is not None and not has_text:
            context["stage"] = "reading"  # a plan of calls reads its parts first
            context["progress"] = state.progress
            # Only the report's call says how far it has read: in a plan of more than one
            # call, that is the last, which reads the notes on the parts.
            notes = state.progress.total > 1
            context["reading"] = reading_context(state.progress.reading, notes=notes)
    elif value == Status.FINALIZING:
        context["detail"] = "checking and saving the report"
    elif value == Status.SUCCEEDED:
        context["detail"] = "the report was checked and saved"
    elif value == Status.FAILED:
        context["detail"] = failure_short(state.error_type) or "failed"
    elif value == Status.RECONCILIATION_REQUIRED:
        context["detail"] = "needs an admin"
    return context


def reading_context(
    reading: events.Reading | None, *, notes: bool = False
) -> dict[str, Any] | None:
    """Return what the status line says while the model reads the report's prompt: how
    far, in words, and the time it should take yet (the page counts it down)."""
    if reading is None:
        return None
    eta = reading.eta_s
    return {
        "words": wording.reading(reading.tokens_read, reading.tokens_total, notes=notes),
        "tokens_read": reading.tokens_read,
        "tokens_total": reading.tokens_total,
        "eta_s": eta,
        "time_left": wording.time_left(eta) if eta is not None else "",
    }


def failure_short(error_type: str) -> str:
    """Return a failure's reason in a few words, for a status line; "" for none."""
    return wording.FAILURES.get(error_type, ("", ""))[0]


def running_ahead_of_others(task: Task) -> int:
    """Return how many reports the owner of the queued `task` has running when that makes
    it wait behind other people's (at least REPORTS_USER_MAX_RUNNING, and another owner's
    task waits in its lane: the claim takes theirs first); 0 when it does not. One query.

    The answer is the same for every queued task of one owner in one lane: an owner under
    the cap is behind nobody's, and the tasks of one at the cap are not among the others."""
    row = _AHEAD_OF_OTHERS.first(task.pk)
    if row is None:  # deleted meanwhile: nobody waits behind it
        return 0
    running, waiting = row
    return running if waiting and running >= settings.REPORTS_USER_MAX_RUNNING else 0


@dataclass(frozen=True)
class QueueReads:
    """How a queued task's status line reads what it shares with the other queued tasks:
    the provider's circuit, the lane's wait a place, and the owner's reports running ahead
    (each answer the same for every task of the lane, or of the owner in it)."""

    circuit: Callable[[], ProviderCircuit | None]
    seconds_a_place: Callable[[str], float | None]  # by lane
    running_ahead: Callable[[Task], int]  # the same for an owner's tasks in a lane


# A page's first line and its status events read afresh.
FRESH = QueueReads(ProviderCircuit.objects.current, seconds_a_place, running_ahead_of_others)
# A line sent again only because the place in line moved (every queued page of a process,
# each time the queue moves, at most every 2 s a page) takes answers up to a second old:
# at S = 800 these reads were a third of the commits a report (docs/capacity.md).
QUEUE_READS_HELD_S = 1.0
HELD = QueueReads(
    Held(ProviderCircuit.objects.current, for_s=QUEUE_READS_HELD_S),
    Held(seconds_a_place, for_s=QUEUE_READS_HELD_S),
    Held(
        running_ahead_of_others,
        for_s=QUEUE_READS_HELD_S,
        key=lambda task: (task.owner_id, task.lane),
    ),
)


def _queued_detail(task: Task, state: TaskState, reads: QueueReads) -> str:
    position = task.queue_position()
    if position is None:  # claimed since the task was read: it is on its way
        return "starting now"
    circuit = reads.circuit()
    if circuit is not None and not circuit.is_closed:  # it waits for the provider
        return wording.provider_unavailable(circuit.next_try_at)
    pace = reads.seconds_a_place(task.lane)
    line = wording.place_in_line(position)
    line += f", estimated wait {duration_words(pace * position)}" if pace is not None else ""
    running = reads.running_ahead(task)
    if running:
        line = f"{wording.behind_others(running, settings.REPORTS_USER_MAX_RUNNING)}; {line}"
    if not state.status_attempt:
        return line
    if state.retry_after_s:
        why = f"trying again: the provider asked us to wait {state.retry_after_s:g} s"
    elif state.retried_for_error:
        why = "trying again after a provider error"
    else:
        why = restarted_words(task.pk, state.status_attempt + 1) or (
            "starting again: the last try was interrupted"
        )
    return f"{why}; {line}"


@dataclass(frozen=True)
class Incomplete:
    """Why a task ended without a report: the reason, the message it ended with, and
    what became of the text that arrived."""

    reason: str
    message: str
    partial: str
    # What the page offers: "retry" (the same documents again can help), "upload" (only
    # another file can), or "" (nothing the owner can do here: a budget spent).
    remedy: str = "retry"


def incomplete_context(state: TaskState, *, notes: bool = False) -> Incomplete | None:
    """Return why a task ended without a report, in plain words; None when it did not
    (it succeeded, or has not ended). `notes`: what arrived is a plan's notes so far
    (`notes_so_far`), not the report's text."""
    if not state.ended or state.status == Status.SUCCEEDED:
        return None
    message = state.message
    if state.status == Status.CANCELLED:
        reason, message = wording.CANCELLED, ""
    elif state.status == Status.RECONCILIATION_REQUIRED:
        reason = wording.UNKNOWN_OUTCOME
    else:
        reason = wording.FAILURES.get(state.error_type, ("", "The report failed."))[1]
    remedy = "retry"
    if state.error_type == ErrorType.INVALID_INPUT:
        # The reader's own words say what is wrong with the file; running it again cannot
        # help, another file can.
        reason, message, remedy = message or reason, "", "upload"
    elif state.error_type == ErrorType.BUDGET_EXHAUSTED:
        remedy = ""
    if notes:
        partial = wording.NOTES_BELOW
    elif not state.partial:
        partial = "No text arrived."
    elif state.error_type == ErrorType.VALIDATION_FAILED:
        partial = "The text below arrived whole; it is shown as written, without formatting."
    else:
        partial = "The text below is what arrived before it stopped; it is incomplete."
    return Incomplete(reason, message, partial, remedy)


# CommonMark's backslash escapes: a backslash before ASCII punctuation.
_MARKDOWN_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")


def readable(text: str) -> str:
    """Return streamed Markdown as a reader sees it in plain text: no escape backslashes."""
    return _MARKDOWN_ESCAPE.sub(r"\1", text)


# --- the page snapshot ---------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """The task page's text at `seq`, as a reader sees it: the current attempt's and
    each replaced attempt's (docs/lifecycle.md: shown as its own, interrupted)."""

    seq: int
    attempt: int
    text: str
    earlier: list[AttemptText]


def task_state(task: Task) -> TaskState:
    """Fold the task's events up to its `last_seq`: the state its page shows."""
    stored = TaskEvent.objects.filter(task_id=task.pk, seq__lte=task.last_seq).order_by("seq")
    state = events.fold(stored.as_events())
    state.seq = task.last_seq
    return state


def status_at(task: Task, upto: int) -> TaskState:
    """Fold the task's last status-bearing event at or before seq `upto` (its text is not
    read): what its status line says at that seq."""
    latest = (
        TaskEvent.objects.filter(task_id=task.pk, seq__lte=upto)
        .filter(type__in=events.STATUS_BEARING)
        .order_by("-seq")[:1]
    )
    state = events.fold(event.as_event() for event in latest)
    state.seq = upto
    return state


def snapshot(state: TaskState) -> Snapshot:
    return Snapshot(
        seq=state.seq,
        attempt=state.attempt,
        text=readable(state.text),
        earlier=[AttemptText(a.number, readable(a.text)) for a in state.earlier],
    )


def task_title(task: Task) -> str:
    names = [d.name for d in task.documents.all()]
    if not names:
        return "Report"
    if len(names) == 1:
        return names[0]
    return f"{names[0]} and {len(names) - 1} more"


def source_passage(task: Task, passage_id: str) -> SourcePassage | None:
    """Return the task's passage named by `passage_id` ("S12"), or None for any other id."""
    match = PASSAGE_ID.fullmatch(passage_id)
    if match is None:
        return None
    return task.passages.filter(number=int(match[1])).first()


@dataclass(frozen=True)
class PassageBlock:
    """A piece of a passage as its page shows it: text as it was read, or a table the
    parsers wrote as a pipe table (docs/parsers.md), its header and rows."""

    text: str = ""
    header: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()


def passage_blocks(text: str) -> list[PassageBlock]:
    """Return the passage's text in blocks: each run of lines that is a pipe table a
    table, the rest text exactly as it was read (without the line breaks at a table's
    edges). A reader checks a figure against columns, not against rows of pipes."""
    blocks: list[PassageBlock] = []
    lines = text.split("\n")
    plain: list[str] = []
    index = 0
    while index < len(lines):
        end = index
        while end < len(lines) and lines[end].lstrip().startswith("|"):
            end += 1
        rows = table_facts.rows_of(lines[index:end]) if end - index >= 3 else None
        if rows is None or not any("---" in line for line in lines[index:end]):
            plain.append(lines[index])
            index += 1
            continue
        if "\n".join(plain).strip("\n"):
            blocks.append(PassageBlock(text="\n".join(plain).strip("\n")))
        plain = []
        blocks.append(PassageBlock(header=tuple(rows[0]), rows=tuple(map(tuple, rows[1:]))))
        index = end
    if "\n".join(plain).strip("\n") or not blocks:
        blocks.append(PassageBlock(text="\n".join(plain).strip("\n") if blocks else text))
    return blocks


def passage_neighbours(task: Task, passage: SourcePassage) -> tuple[str | None, str | None]:
    """Return the ids of the passages before and after `passage` in its task (None: none)."""
    numbers = set(
        task.passages.filter(number__in=[passage.number - 1, passage.number + 1]).values_list(
            "number", flat=True
        )
    )
    before, after = passage.number - 1, passage.number + 1
    return (f"S{before}" if before in numbers else None, f"S{after}" if after in numbers else None)


def plan_sizes() -> dict[str, int]:
    """Return what the upload form estimates a plan of calls from (`plan.sizes`), counted
    at CHARS_PER_TOKEN: the provider's own count is learned only once a task runs."""
    return planning.sizes(
        planning.Counting(
            context_tokens=settings.REPORTS_CONTEXT_TOKENS,
            max_output_tokens=settings.REPORTS_MAX_OUTPUT_TOKENS,
            chars_per_token=CHARS_PER_TOKEN,
            max_calls=settings.REPORTS_MAX_PARTS,
        )
    )


def plan_notice(task: Task, state: TaskState) -> str:
    """Return the notice above the report of a task read in parts, in the tense of where
    the task stands: being read, read, or stopped part-way (how far it came); "" for one
    call."""
    parts = (task.plan or {}).get("parts") or 0
    if not parts:
        return ""
    calls = (task.plan or {}).get("calls") or parts + 1
    stopped = state.ended and state.status != Status.SUCCEEDED
    are, writes = ("are", "writes") if not state.ended else ("were", "wrote")
    if stopped:
        writes = "was to write"
    if parts == 1:
        # The documents fit a call of notes, but not one with room to write the report.
        head = "Planned in two steps" if stopped else "Read in two steps"
        why = f"the documents and the report together {are} longer than one call of the model"
        why += " holds"
        how = f"{writes} notes on the documents first, then the report from the notes"
    else:
        head = f"Planned in {parts} parts" if stopped else f"Read in {parts} parts"
        why = f"the documents {are} longer than one call of the model reads"
        how = f"{writes} notes on each part, then the report from the notes"
    said = f"{head}: {why}, so it {how} ({calls} calls in all)."
    if not state.ended:
        return f"{said} Every passage is read."
    if not stopped:
        return f"{said} Every passage was read."
    # How far it came: the calls done, the notes an earlier attempt wrote included. The
    # parts come first, then the rounds that combine their notes, then the report's call.
    done = state.progress.done if state.progress is not None and state.progress.total else 0
    if done >= calls - 1:
        return f"{said} Every part was read; it stopped while writing the report from the notes."
    if done >= parts:
        return f"{said} Every part was read; it stopped while combining the notes."
    if parts == 1:
        return f"{said} It stopped before the notes were written: the report was not written."
    if not done:
        return (
            f"{said} It stopped before notes on any part were written: the report was not written."
        )
    return (
        f"{said} It stopped with notes on {done} of the {parts} parts: the other parts were "
        "not read and the report was not written."
    )


# Every succeeded report's outcome on its pages reads it: compiled once
# (reports.models.compiled).
_REMOVED_CITATIONS = CompiledRead(
    lambda task_id, number: Attempt.objects.filter(task_id=task_id, number=number).values_list(
        "removed_citations"
    )[:1],
    lambda task_id, number: [  # in the ORM's order: a filter's names sorted
        (Attempt._meta.get_field("number"), number),
        (Attempt._meta.get_field("task"), task_id),
    ],
)


def citation_notice(task: Task) -> str:
    """Say what a reader who checks a succeeded report against its passages should know:
    that it cites none, or that citations naming no passage were taken out
    (docs/api.md, "Settled at finalization"); "" when every citation it wrote stands."""
    found = _REMOVED_CITATIONS.first(task.pk, task.attempt_count)
    removed = found[0] if found is not None and found[0] else 0
    return wording.citations_settled(
        cites=bool(rendering.linked_passages(task.report_html)), removed=removed
    )


def notes_so_far(task: Task, state: TaskState) -> str:
    """Return the notes a plan of calls wrote before its task ended without the report's
    text (the attempt's text, under wording.NOTES_SO_FAR, docs/lifecycle.md); "" for any
    other task. They are the partial text of such a task: no `delta` carried them."""
    if not task.plan or not state.ended or state.status == Status.SUCCEEDED or state.text:
        return ""
    text = (
        Attempt.objects.filter(task_id=task.pk, number=state.attempt)
        .values_list("text", flat=True)
        .first()
    )
    return text if text and text.startswith(wording.NOTES_SO_FAR) else ""


def page_context(task: Task) -> dict[str, Any]:
    """Return the task page's template context: the snapshot, status and outcome."""
    prefetch_related_objects([task], "documents")  # the title names them all
    state = task_state(task)
    context = {
        "task": task,
        "title": task_title(task),
        "seq": state.seq,
        "snapshot": snapshot(state),
        "terminal": state.ended,
        # Where reports are written, so that the page says what a lost connection means:
        # the web server's own worker stops with it; workers of their own go on.
        "worker": "embedded" if settings.REPORTS_EMBEDDED_WORKER else "separate",
    }
    context.update(outcome_context(task, state))
    context["status"] = status_context(task, state, has_text=bool(state.text))
    return context


def report_in_its_language(report_html: str) -> tuple[str, str]:
    """Return the report's language where it is not the page's own (English), else "", and
    its HTML with `lang` on each block in another language than the report: so that a
    browser draws Han characters in the shapes of their language (Japanese, Korean,
    Simplified or Traditional Chinese), not in those of whichever its fonts hold first.
    Read from the stored HTML, as the HTML download reads it (reports.exports.language):
    a report stored before needs nothing of its own."""
    if not language.may_hold_cjk(report_html):  # at once, for most reports
        return "", report_html
    return _in_its_language(report_html)


@functools.lru_cache(maxsize=8)
def _in_its_language(report_html: str) -> tuple[str, str]:
    """Read letter by letter (some 30 ms for a report of 100,000 characters), so once a
    report for all the pages that show it, on the thread they share: a few reports'
    worth of memory."""
    lang, body = html.languages(report_html)
    return ("" if lang == language.DEFAULT else lang), body


def outcome_context(task: Task, state: TaskState) -> dict[str, Any]:
    succeeded = state.status == Status.SUCCEEDED
    notes = notes_so_far(task, state)
    # Under the page's own title, which names the documents.
    report_lang, report_html = (
        report_in_its_language(rendering.under_page_title(task.report_html))
        if succeeded
        else ("", "")
    )
    return {
        "succeeded": succeeded,
        "active": not state.ended,
        "incomplete": incomplete_context(state, notes=bool(notes)),
        "partial": state.partial,
        "notes": notes,
        "download_name": download_names.report_file_name(task),
        "report_html": report_html,
        "report_lang": report_lang,
        "late_cancel": succeeded and task.cancel_requested_at is not None,
        "cost": cost_words(task),  # settled in the same transaction as the end
        "plan_notice": plan_notice(task, state),
        "citation_notice": citation_notice(task) if succeeded else "",
    }


def home_rows(tasks: Iterable[Task]) -> list[dict[str, Any]]:
    """Return a one-line status for each of the tasks, for the home page's list (its tasks'
    places in line annotated, `with_queue_position`): their documents read in one query."""
    tasks = list(tasks)
    prefetch_related_objects(tasks, "documents")
    rows = []
    for task in tasks:
        detail = ""
        if task.status == Status.QUEUED:
            detail = wording.place_in_line(task.queue_position())
        elif task.status == Status.RUNNING:
            detail = "in progress"  # reading or writing: the task's page says which
        elif task.status == Status.FAILED:
            detail = failure_short(task.error_type)
        rows.append(
            {
                "task": task,
                "title": task_title(task),
                "label": LABELS.get(task.status, task.status),
                "detail": detail,
                "plan": plan_words(task),
            }
        )
    return rows


def plan_words(task: Task) -> str:
    """Say in a few words, for the list of reports, that a task is read in parts: "read in
    12 parts", or "planned in 12 parts" once it ended without being read; "" for one call."""
    parts = (task.plan or {}).get("parts") or 0
    if not parts:
        return ""
    verb = "planned" if task.status in TERMINAL and task.status != Status.SUCCEEDED else "read"
    return f"{verb} in two steps" if parts == 1 else f"{verb} in {parts} parts"


def any_active(rows: Iterable[dict]) -> bool:
    return any(row["task"].status not in TERMINAL for row in rows)


# --- money ---------------------------------------------------------------------------


def budget_context(budget) -> dict[str, str]:
    """Return the user's budget in dollars, for the upload form: what is left, and what is
    held, split into reports still running and outcomes awaiting an admin's check."""
    awaiting = (
        Task.objects.filter(
            owner_id=budget.user_id, cost_status=CostStatus.PENDING_RECONCILIATION
        ).aggregate(held=Sum("reserved_micros"))["held"]
        or 0
    )
    running = max(0, budget.reserved_micros - awaiting)
    return {
        "remaining": budgets.usd(max(0, budget.remaining_micros)),
        "limit": budgets.usd(budget.limit_micros),
        "running": budgets.usd(running) if running else "",
        "awaiting": budgets.usd(awaiting) if awaiting else "",
    }


def cost_words(task: Task) -> str:
    """Return what the task cost, or holds, in plain words; "" before budgets existed."""
    if task.cost_status == CostStatus.RESERVED:
        if not task.reserved_micros:  # a model with no price: nothing is held
            return "free: its model has no price"
        return f"up to {budgets.usd(task.reserved_micros)} reserved from your budget"
    if task.cost_status == CostStatus.SETTLED:
        return f"cost {budgets.usd(task.cost_micros)}" if task.cost_micros else "cost nothing"
    if task.cost_status == CostStatus.RELEASED:
        return "cost nothing"
    if task.cost_status == CostStatus.PENDING_RECONCILIATION:
        return (
            f"cost not yet known: {budgets.usd(task.reserved_micros)} stays reserved "
            "until an administrator settles it"
        )
    return ""
