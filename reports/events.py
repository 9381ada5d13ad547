"""The events a task emits: their names, what each carries, the wire row, and the fold
that reads them back into the task's state.

One vocabulary for the whole house (docs/api.md, "Events"). Writers build an event's
type and data only through the constructors below and hand the `Draft` to the one
writer (`TaskQuerySet.transition` / `append_events`), which stamps the `attempt`
number and the `seq` in the transaction that commits it. Readers never spell an
event's keys either: they fold events with `fold` (below) into a `TaskState`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from reports.states import TERMINAL, Status

STATUS = "status"
DELTA = "delta"
PROGRESS = "progress"
# A task's last event is named after its terminal status (succeeded, failed, …).
TERMINAL_TYPES = frozenset(str(status) for status in TERMINAL)
TYPES = frozenset({STATUS, DELTA, PROGRESS, *TERMINAL_TYPES})
# The key under which the writer stamps each event's attempt number.
ATTEMPT = "attempt"
# The events that announce a task's status (the others carry text or progress).
STATUS_BEARING = frozenset({STATUS, *TERMINAL_TYPES})


@dataclass(frozen=True)
class Draft:
    """An event not yet written: its type and data, without `attempt` and `seq`."""

    type: str
    data: dict[str, Any]

    def stamped(self, attempt: int) -> dict[str, Any]:
        """Return the data as stored: stamped with the attempt it belongs to (the task's
        attempt count when it commits)."""
        return {ATTEMPT: attempt, **self.data}


@dataclass(frozen=True)
class Event:
    """A committed event: the task's `seq`-th, its data stamped with its attempt."""

    task_id: uuid.UUID
    seq: int
    type: str
    data: dict[str, Any]

    def as_row(self) -> list:
        """Return [seq, type, data]: how a channel-layer message carries this event."""
        return [self.seq, self.type, self.data]

    @classmethod
    def from_row(cls, task_id, row: list) -> Event:
        seq, event_type, data = row
        return cls(task_id, int(seq), event_type, data)

    @property
    def attempt(self) -> int:
        """The attempt the event belongs to (0 before the first attempt started)."""
        return int(self.data.get(ATTEMPT) or 0)

    @property
    def is_terminal(self) -> bool:
        return self.type in TERMINAL_TYPES

    @property
    def is_delta(self) -> bool:
        return self.type == DELTA

    @property
    def text(self) -> str:
        """The text a `delta` event carries ("" for any other event)."""
        return self.data.get("text", "") if self.type == DELTA else ""

    @property
    def status(self) -> str:
        """The task status the event announces; "" for one that announces none (text,
        progress)."""
        if self.type == STATUS:
            return self.data.get("status", "")
        return self.type if self.type in TERMINAL_TYPES else ""

    @property
    def starts_attempt(self) -> bool:
        """Whether the event is the start of an attempt: its task began running it."""
        return self.status == Status.RUNNING


@dataclass(frozen=True)
class Reading:
    """How far the model has read the report's prompt: `tokens_read` of `tokens_total`
    (None: the server does not say), about `eta_s` seconds more (None: not known)."""

    tokens_read: int | None
    tokens_total: int | None
    eta_s: float | None


@dataclass(frozen=True)
class Progress:
    """How far the current attempt's plan of calls has come, and, while the model reads
    the report's prompt, how far it has read."""

    done: int
    total: int
    label: str
    reading: Reading | None = None


@dataclass(frozen=True)
class AttemptText:
    """The text one attempt wrote."""

    number: int
    text: str


@dataclass
class TaskState:
    """A task as its events up to `seq` say it is (see `fold`)."""

    seq: int = 0
    status: str = str(Status.QUEUED)
    # The data of the latest event that announced a status, and its seq (0: none yet).
    status_data: dict[str, Any] = field(default_factory=dict)
    status_seq: int = 0
    attempt: int = 0  # the current attempt: the latest that started or wrote text
    texts: dict[int, list[str]] = field(default_factory=dict)  # per attempt, in order
    progress: Progress | None = None  # the latest progress of the current attempt

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL_TYPES

    @property
    def terminal(self) -> dict[str, Any] | None:
        """The terminal event's data, once the task ended."""
        return self.status_data if self.ended else None

    @property
    def text(self) -> str:
        """The current attempt's text: the report as far as it has been written."""
        return self.texts_of(self.attempt)

    def texts_of(self, number: int) -> str:
        """The text attempt `number` wrote."""
        return "".join(self.texts.get(number, ()))

    @property
    def earlier(self) -> list[AttemptText]:
        """The text of each attempt a later one replaced, oldest first (none without text)."""
        found = (AttemptText(n, "".join(parts)) for n, parts in sorted(self.texts.items()))
        return [a for a in found if a.number < self.attempt and a.text]

    # --- what the latest status-bearing event says ---------------------------------------

    @property
    def status_attempt(self) -> int:
        """The attempt count when the status was announced: 0 while the first attempt
        has yet to start, N when attempt N runs, or was requeued."""
        return int(self.status_data.get(ATTEMPT) or 0)

    @property
    def retry_after_s(self) -> float | None:
        """The wait the provider asked for before a retry (None: it asked for none)."""
        return self.status_data.get("retry_after_s")

    @property
    def retried_for_error(self) -> bool:
        """Whether a requeue was a retry after a retryable error (rather than after a lost
        worker or an administrator's resolution)."""
        return "retry_after_s" in self.status_data

    @property
    def error_type(self) -> str:
        return self.status_data.get("error_type", "")

    @property
    def message(self) -> str:
        """The user's wording of why the task ended without a report."""
        return self.status_data.get("message", "")

    @property
    def partial(self) -> bool:
        """Whether an ended task had text when it ended without a report."""
        return bool(self.status_data.get("partial"))


def fold(events: Iterable[Event], state: TaskState | None = None) -> TaskState:
    """Apply `events` (in seq order) to `state`, or to a task with no event yet; return it.

    Incremental: a reader keeps the state and folds each new batch into it; an event at
    or before the state's seq was folded already and is skipped. The rules:

    * a `delta` adds to its attempt's text; an attempt whose text or start comes is the
      current one, and a new current attempt replaces the text shown (the earlier
      attempt's text is kept as its own);
    * every other event but `progress` announces the task's status, and its data is what
      the status line and the outcome read;
    * `progress` is kept for the current attempt only, and never goes back.
    """
    state = state if state is not None else TaskState()
    for event in events:
        if event.seq <= state.seq:
            continue
        state.seq = event.seq
        number = event.attempt
        if event.is_delta or event.type == PROGRESS or event.starts_attempt:
            _current(state, number)
        if event.is_delta:
            state.texts.setdefault(number, []).append(event.text)
        elif event.type == PROGRESS:
            _progress(state, number, event.data)
        else:
            state.status = event.status
            state.status_data = event.data
            state.status_seq = event.seq
    return state


def _current(state: TaskState, number: int) -> None:
    if number > state.attempt:
        state.attempt, state.progress = number, None


def _progress(state: TaskState, number: int, data: dict[str, Any]) -> None:
    if number != state.attempt:
        return  # an attempt that was replaced: its progress is not the task's
    done = int(data.get("done") or 0)
    if state.progress is not None and done < state.progress.done:
        return
    reading = data.get("reading")
    state.progress = Progress(
        done,
        int(data.get("total") or 0),
        data.get("label", ""),
        Reading(reading.get("tokens_read"), reading.get("tokens_total"), reading.get("eta_s"))
        if isinstance(reading, dict)
        else None,
    )


# --- constructors: the only places an event's data is spelled --------------------------


def status(to: str) -> Draft:
    """A task moved to a non-terminal status (running, finalizing, or queued at first)."""
    return Draft(STATUS, {"status": str(to)})


def requeued(
    *, retry_after_s: float | None = None, reason: str = "", resolved_by: str = ""
) -> Draft:
    """A task went back to the queue for another attempt.

    `reason` is the error type that made the attempt retryable, with the provider's
    requested wait; an attempt whose worker was lost is requeued with neither, and an
    administrator's resolution names who resolved it.
    """
    data: dict[str, Any] = {"status": str(Status.QUEUED)}
    if reason or retry_after_s is not None:
        data["retry_after_s"] = retry_after_s
        data["reason"] = str(reason)
    if resolved_by:
        data["resolved_by"] = resolved_by
    return Draft(STATUS, data)


def delta(text: str) -> Draft:
    """Text the current attempt wrote, in order (a coalesced chunk of the stream)."""
    return Draft(DELTA, {"text": text})


def progress(
    done: int,
    total: int,
    label: str,
    *,
    tokens_read: int | None = None,
    tokens_total: int | None = None,
    eta_s: float | None = None,
) -> Draft:
    """How far a plan of calls has come: `done` of `total` calls, reading `label`; while
    the model reads the report's prompt, also how far (`tokens_read` of `tokens_total`,
    about `eta_s` seconds more; each None when not known)."""
    data: dict[str, Any] = {"done": done, "total": total, "label": label}
    if tokens_read is not None or tokens_total is not None or eta_s is not None:
        data["reading"] = {
            "tokens_read": tokens_read,
            "tokens_total": tokens_total,
            "eta_s": None if eta_s is None else round(eta_s, 1),
        }
    return Draft(PROGRESS, data)


def succeeded(result_id) -> Draft:
    return Draft(str(Status.SUCCEEDED), {"result_id": str(result_id)})


def failed(error_type: str, message: str, *, partial: bool, resolved_by: str = "") -> Draft:
    """The task failed; `message` is the user's wording, `partial` whether text arrived;
    `resolved_by` names the administrator who marked it failed."""
    data = {"error_type": str(error_type), "partial": partial, "message": message}
    if resolved_by:
        data["resolved_by"] = resolved_by
    return Draft(str(Status.FAILED), data)


def cancelled(*, partial: bool) -> Draft:
    return Draft(str(Status.CANCELLED), {"partial": partial})


def reconciliation_required(message: str, *, partial: bool) -> Draft:
    return Draft(str(Status.RECONCILIATION_REQUIRED), {"partial": partial, "message": message})


def ended(
    to: str, *, error_type: str = "", message: str = "", partial: bool = False, result_id=None
) -> Draft:
    """The terminal event for status `to`, from whatever the ending code knows."""
    if to == Status.SUCCEEDED:
        return succeeded(result_id)
    if to == Status.FAILED:
        return failed(error_type, message, partial=partial)
    if to == Status.CANCELLED:
        return cancelled(partial=partial)
    if to == Status.RECONCILIATION_REQUIRED:
        return reconciliation_required(message, partial=partial)
    raise ValueError(f"{to} is not a terminal status")
