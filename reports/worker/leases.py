"""Claiming queued tasks under leases, renewing them, and reaping the ones that expired.

Every function here is one short transaction, safe to call from any number of
processes at once; the worker calls them off its event loop.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F
from django.db.models.functions import Coalesce, Now

from reports import budgets, events, lifecycle, providers
from reports.clock import Clock
from reports.models import (
    CLAIM_ORDER,
    LEASED,
    Attempt,
    AttemptStatus,
    CompiledInsert,
    CompiledRead,
    CompiledUpdate,
    ErrorType,
    Event,
    PlanCall,
    Status,
    Task,
    TaskEvent,
    db_now_plus,
    live_lease_parameters,
)
from reports.observability.task_logs import log_reaped
from reports.providers import concurrency
from reports.providers.prompts import PROMPT_VERSION, estimated_usage
from reports.worker import breaker, identity
from reports.worker.retries import RetryPolicy

# Any fixed number: every claimer takes the same PostgreSQL advisory lock.
CLAIM_LOCK = 7_240_501


class LeaseLost(Exception):
    """The task is no longer ours: a write changed zero rows. Stop and write nothing."""


@dataclass(frozen=True)
class Claim:
    task_id: object
    attempt_id: object
    number: int
    epoch: int
    lane: str
    created_at: datetime
    started_at: datetime  # the attempt's start, on the database's clock
    events: tuple[Event, ...]
    # Where the task's logs and trace join (the creating request), and since when this
    # attempt waited: the submit for the first, the previous attempt's end for a retry.
    request_id: str = ""
    trace_id: str = ""
    traceparent: str = ""
    queued_since: datetime | None = None
    probe: bool = False  # this attempt's call tests the provider's open circuit
    # The provider's learned reading rate as the claim read it with the calls' limit
    # (reports.providers.reading_rate): the attempt's first call needs no read of its own.
    reading_rate: float | None = None
    model: str = ""  # the task's, which prices its calls (set at submit, never changed)

    @property
    def age_at_start_s(self) -> float:
        """Seconds from submit to this attempt's start, both on the database's clock."""
        return (self.started_at - self.created_at).total_seconds()


@dataclass(frozen=True)
class Slots:
    """What the live leases leave free: the lanes with a slot, and the owners at their cap."""

    lanes: list[str]
    owners_at_cap: list


_STATUS, _LANE, _OWNER = (Task._meta.get_field(name) for name in ("status", "lane", "owner"))


class _Head(NamedTuple):
    """What the claim hands on of the task it takes, that claiming does not change."""

    pk: object
    epoch: int
    attempt_count: int
    lane: str
    created_at: datetime
    request_id: str
    trace_id: str
    traceparent: str
    model: str


_HEAD = ("id", *_Head._fields[1:])  # its columns, as `values_list` names them
# The claim's reads, compiled once (reports.models.compiled): most of a claim's time was
# the ORM building them, on the thread and before the call every first text waits for.
_ANY_ELIGIBLE = CompiledRead(
    lambda lanes: Task.objects.eligible().filter(lane__in=lanes).values_list("pk")[:1],
    lambda lanes: [(_STATUS, Status.QUEUED), *((_LANE, lane) for lane in lanes)],
    shape=len,
)
_LIVE_LEASES = CompiledRead(
    lambda: (
        Task.objects.live_leases()
        .values_list("lane", "owner_id")
        .annotate(n=Count("id"))
        .order_by()
    ),
    live_lease_parameters,
)


def _eligible_of(lanes, owners_skipped):
    queued = Task.objects.eligible().filter(lane__in=lanes)
    return queued.exclude(owner_id__in=owners_skipped) if owners_skipped else queued


# Every claim inserts its attempt: compiled once.
_NEW_ATTEMPT = CompiledInsert(Attempt)
_OLDEST = CompiledRead(
    lambda lanes, skipped: (
        _eligible_of(lanes, skipped).order_by(*CLAIM_ORDER).values_list(*_HEAD)[:1]
    ),
    lambda lanes, skipped: [
        (_STATUS, Status.QUEUED),
        *((_LANE, lane) for lane in lanes),
        *((_OWNER, owner) for owner in skipped),
    ],
    shape=lambda lanes, skipped: (len(lanes), len(skipped)),
)


def free_slots(lanes) -> Slots:
    """Count the live leases once, by lane and owner (one grouped read of at most
    REPORTS_MAX_RUNNING rows): the lanes, among `lanes`, with a free slot under the caps
    ([] when full), and the owners with `REPORTS_USER_MAX_RUNNING` or more running."""
    by_lane, by_owner = Counter(), Counter()
    for lane, owner, n in _LIVE_LEASES.rows():
        by_lane[lane] += n
        by_owner[owner] += n
    if by_lane.total() >= settings.REPORTS_MAX_RUNNING:
        return Slots([], [])
    limits = settings.REPORTS_LANE_LIMITS
    cap = settings.REPORTS_USER_MAX_RUNNING
    return Slots(
        [lane for lane in lanes if by_lane[lane] < limits.get(lane, 0)],
        [owner for owner, n in by_owner.items() if n >= cap],
    )


def _oldest(circuit: breaker.Gate, lanes, owners_skipped) -> _Head | None:
    """The oldest claimable task (its read compiled once, unless an open circuit narrows
    the claimable to the tasks past their deadline, which is rare)."""
    if circuit.lets_all:
        row = _OLDEST.first(lanes, owners_skipped)
    else:
        claimable = circuit.filter(_eligible_of(lanes, owners_skipped))
        row = claimable.order_by(*CLAIM_ORDER).values_list(*_HEAD).first()
    return None if row is None else _Head(*row)


def claim_next_task(
    worker_id: str, lanes=("short", "long"), clock: Clock | None = None
) -> Claim | None:
    """Claim the oldest eligible queued task of a lane with a free slot, or return None.

    Caps are counted from live leases inside the same transaction as the claim, and
    claims are serialised (SQLite's IMMEDIATE transactions, PostgreSQL's advisory
    lock), so no number of concurrent claimers can exceed them. While another user's
    task is eligible for the slot, the tasks of an owner with `REPORTS_USER_MAX_RUNNING`
    running are not: the oldest of the others' is claimed; when nobody else's waits,
    the oldest of all. While the provider's circuit is open, only the probe (one task,
    when it is due) and tasks past their deadline are claimed (`reports.worker.breaker`);
    `clock` is the circuit's.

    Most looks find nothing (an idle poll, the look after each attempt's end): those end
    after one indexed read outside any transaction, which neither takes SQLite's write
    lock nor waits for another claimer. A task queued after that read wakes the loop
    again when it commits.
    """
    lanes = tuple(dict.fromkeys(lanes))
    if _ANY_ELIGIBLE.first(lanes) is None:
        return None
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CLAIM_LOCK])
        slots = free_slots(lanes)
        if not slots.lanes:
            return None
        figures = concurrency.read_figures()
        if not concurrency.has_free_seat(figures):  # calls at once (docs/providers.md)
            return None
        circuit = breaker.gate(clock)
        task = None
        if slots.owners_at_cap:  # the others' first; none waits: the cap holds nobody back
            task = _oldest(circuit, slots.lanes, slots.owners_at_cap)
        if task is None:
            task = _oldest(circuit, slots.lanes, ())
        if task is None:
            return None
        number, epoch = task.attempt_count + 1, task.epoch + 1
        admitted = circuit.admit(task.pk, epoch)
        if admitted is None:
            return None
        event = Task.objects.transition(
            task.pk,
            Status.QUEUED,
            Status.RUNNING,
            expect_epoch=task.epoch,
            event=events.status(Status.RUNNING),
            attempt_count=number,
            worker_id=worker_id,
            lease_expires_at=db_now_plus(settings.REPORTS_LEASE_S),
            claimed_at=Coalesce("claimed_at", Now()),
            not_before=None,
            cancel_requested_at=None,
            epoch=F("epoch") + 1,
        )
        if event is None:
            return None
        # Its start, the database's clock, comes back from the insert (RETURNING).
        attempt = Attempt(
            task_id=task.pk,
            number=number,
            epoch=epoch,
            worker_id=worker_id,
            prompt_version=PROMPT_VERSION,  # what this worker writes with
        )
        _NEW_ATTEMPT.insert([attempt])
        previous_end = (
            Attempt.objects.filter(task_id=task.pk, number=number - 1)
            .values_list("ended_at", flat=True)
            .first()
            if number > 1
            else None
        )
        return Claim(
            task.pk,
            attempt.pk,
            number,
            epoch,
            task.lane,
            task.created_at,
            attempt.started_at,
            (event,),
            request_id=task.request_id,
            trace_id=task.trace_id,
            traceparent=task.traceparent,
            queued_since=previous_end or task.created_at,
            probe=admitted == breaker.PROBE,
            reading_rate=figures.reading_tokens_per_s if figures is not None else None,
            model=task.model,
        )


def renew_lease(task_id, epoch: int) -> bool:
    """Extend our lease; return whether a cancel was requested. Raise LeaseLost."""
    changed = Task.objects.filter(pk=task_id, epoch=epoch, status__in=LEASED).update(
        lease_expires_at=db_now_plus(settings.REPORTS_LEASE_S)
    )
    if changed != 1:
        raise LeaseLost(task_id)
    return (
        Task.objects.filter(pk=task_id).values_list("cancel_requested_at", flat=True)[0] is not None
    )


def reap_expired_leases() -> list[Event]:
    """Turn every expired lease into a new attempt, `worker_lost`, or reconciliation.

    A lease whose holder is known dead (a process on this host that is gone, see
    `reports.worker.identity`) is as good as expired: it is reaped at once, so a restarted
    server or worker picks its tasks up without waiting `REPORTS_LEASE_S`.

    The dead attempt keeps the text it streamed and is marked interrupted; it is charged
    an estimate when text came back, else its usage is unknown (`_lost_usage`). Each
    reap is conditional on the epoch it saw, so a worker that renewed in time keeps its
    task.
    """
    fields = ("id", "status", "epoch", "attempt_count", "worker_id", "model")
    events: list[Event] = []
    for task in Task.objects.expired_leases().only(*fields):
        events.extend(_reap(task))
    held_here = Task.objects.live_leases().filter(worker_id__startswith=identity.holder_prefix())
    for task in held_here.only(*fields):
        if identity.known_dead(task.worker_id):
            events.extend(_reap(task))
    return events


def mark_parsing(task_id, attempt_id, epoch: int, parsing: bool) -> bool:
    """Record that the attempt starts (or is done) reading its documents; False: lease lost."""
    return bool(
        Attempt.objects.filter(
            pk=attempt_id, task__epoch=epoch, task__status=Status.RUNNING
        ).update(parsing_since=Now() if parsing else None)
    )


def mark_sent(task_id, attempt_id, epoch: int, prompt_chars: int) -> bool:
    """Record the length of the report call's prompt as it is sent; False: lease lost."""
    return bool(_MARK_SENT.count(attempt_id, epoch, prompt_chars))


# On every single-call report's way to its call: compiled once (reports.models.compiled).
_MARK_SENT = CompiledUpdate(
    lambda attempt_id, epoch, chars: Attempt.objects.filter(
        pk=attempt_id, task__epoch=epoch, task__status=Status.RUNNING
    ),
    lambda attempt_id, epoch, chars: {"prompt_chars": chars},
    lambda attempt_id, epoch, chars: [
        (Attempt._meta.get_field("prompt_chars"), chars),
        (Attempt._meta.pk, attempt_id),
        (Task._meta.get_field("epoch"), epoch),
        (_STATUS, Status.RUNNING),
    ],
)


POISON = (
    "Reading this document stopped the worker that read it, so it was not given to another: "
    "it may be malformed or built to stall readers."
)


def _reap(task: Task) -> list[Event]:
    attempt_id, parsing_since, sent_chars = (
        Attempt.objects.filter(task_id=task.pk, number=task.attempt_count)
        .values_list("pk", "parsing_since", "prompt_chars")
        .first()
    ) or (None, None, None)
    if parsing_since is not None and task.status == Status.RUNNING:
        return _fail_poison(task, attempt_id)
    text = TaskEvent.objects.attempt_text(task.pk, task.attempt_count)
    lost = "The worker running this attempt stopped responding."
    to = RetryPolicy.from_settings().after_lost_worker(
        task_status=task.status, attempt=task.attempt_count
    )
    attempt_end = {
        "status": (
            AttemptStatus.RECONCILIATION_REQUIRED
            if to == Status.RECONCILIATION_REQUIRED
            else AttemptStatus.INTERRUPTED
        ),
        "error_type": ErrorType.WORKER_LOST,
        "error_message": lost,
        "text": text,
        **_lost_usage(task, sent_chars, text),
    }
    attempt = lifecycle.AttemptEnd(
        attempt_id,
        attempt_end,
        log=lambda status, to: log_reaped(task.pk, attempt_id, task.attempt_count, to, status),
    )
    if to == Status.QUEUED:
        event = lifecycle.requeue_task(
            task.pk,
            task.status,
            events.requeued(),
            expect_epoch=task.epoch,
            attempt=attempt,
            error_type="",
            user_message="",
        )
    else:
        event = lifecycle.end_task(
            task.pk,
            task.status,
            events.ended(to, error_type=ErrorType.WORKER_LOST, message=lost, partial=bool(text)),
            expect_epoch=task.epoch,
            attempt=attempt,
            error_type=ErrorType.WORKER_LOST,
            user_message=lost,
        )
    return [] if event is None else [event]


def _lost_usage(task: Task, sent_chars: int | None, text: str) -> dict:
    """Return the usage and cost fields of an attempt whose worker was lost.

    When text came back, the prompt sent and the text received are both known: the call
    is charged the estimate a dropped stream gets (`usage_source` "estimate"), with the
    notes calls the attempt finished before it, and an admin may correct it; so is a call
    of a provider inside the worker (the simulated one), which died with it. A call sent
    with no byte back (or a lost worker that never said what it sent) is truly unknown:
    its cost waits for an admin.
    """
    if sent_chars is None or not (text or providers.provider_class().in_process):
        return {"usage_source": "missing"}
    usage = estimated_usage(sent_chars, text)
    cost = budgets.attempt_cost_of(task.pk, task.model, usage, billed_nothing=False)
    notes = PlanCall.objects.filter(
        task_id=task.pk, attempt_number=task.attempt_count, cost_micros__isnull=False
    ).values_list("cost_micros", flat=True)
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "usage_source": usage.source,
        "cost_micros": None if cost is None else cost + sum(notes),
    }


def _fail_poison(task: Task, attempt_id) -> list[Event]:
    """End a task whose worker was lost while it read the documents: the document is to
    blame (a parse that blocked or killed its worker), so no other worker gets it."""
    attempt = lifecycle.AttemptEnd(
        attempt_id,
        {
            "status": AttemptStatus.FAILED,
            "error_type": ErrorType.INVALID_INPUT,
            "error_message": POISON,
            "usage_source": "missing",
            "cost_micros": 0,  # the provider was never called
        },
        log=lambda status, to: log_reaped(
            task.pk, attempt_id, task.attempt_count, to, status, error_type=ErrorType.INVALID_INPUT
        ),
    )
    event = lifecycle.end_task(
        task.pk,
        task.status,
        events.failed(ErrorType.INVALID_INPUT, POISON, partial=False),
        expect_epoch=task.epoch,
        attempt=attempt,
        error_type=ErrorType.INVALID_INPUT,
        user_message=POISON,
    )
    return [] if event is None else [event]
