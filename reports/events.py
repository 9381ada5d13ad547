"""The events a task emits: their names, what each carries, and the wire row.

One vocabulary for the whole house (docs/api.md, "Events"). Writers build an event's
type and data only through the constructors below and hand the `Draft` to the one
writer (`TaskQuerySet.transition` / `append_events`), which stamps the `attempt`
number and the `seq` in the transaction that commits it. Readers never spell an
event's keys either: they fold events with `fold` (below) into a `TaskState`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from reports.states import TERMINAL, Status

STATUS = "status"
DELTA = "delta"
PROGRESS = "progress"
# A task's last event is named after its terminal status (succeeded, failed, …).
TERMINAL_TYPES = frozenset(str(status) for status in TERMINAL)
TYPES = frozenset({STATUS, DELTA, PROGRESS, *TERMINAL_TYPES})


@dataclass(frozen=True)
class Draft:
    """An event not yet written: its type and data, without `attempt` and `seq`."""

    type: str
    data: dict[str, Any]


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
        return int(self.data.get("attempt") or 0)

    @property
    def is_terminal(self) -> bool:
        return self.type in TERMINAL_TYPES


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


def progress(done: int, total: int, label: str) -> Draft:
    """How far a plan of calls has come: `done` of `total` calls, reading `label`."""
    return Draft(PROGRESS, {"done": done, "total": total, "label": label})


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
