"""The provider's circuit breaker (docs/providers.md, "When the provider is down").

Every worker shares one row per provider (`reports.models.ProviderCircuit`). An attempt's
end tells it what the call said of the provider (`after_attempt`); a claim asks it what may
be claimed (`gate`):

* closed — calls go; REPORTS_BREAKER_FAILURES calls in a row that failed for the provider's
  own reasons (`retries.provider_down`) open it;
* open — no task starts a call until `retry_at` (REPORTS_BREAKER_COOLDOWN_S, doubled with
  each failed probe, at most ten minutes); queued tasks wait, their attempts unspent; a task
  past its deadline is still claimed, and ends `timeout` before any call;
* probing — one claim took the probe (a conditional update on the row's version, inside the
  claim's serialised transaction, so two workers cannot both take it): the provider
  answering it closes the circuit, its failure opens it again for twice as long, and a probe
  that ended without saying either (a cancel, a document that could not be read, a lost
  worker) lets the next claim probe at once.

A call's verdict is written under the row's lock, the probe taken by a conditional update on
the row's version; each change of state is logged once, by the worker whose write made it,
when it commits.
Instants come from the worker's clock when it has one of its own (`Clock.wall`: tests), else
from the database's clock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from reports.clock import Clock
from reports.models import LEASED, CircuitState, ProviderCircuit, Task
from reports.models.breaker import cooldown_s, provider_name
from reports.observability.logs import log_event
from reports.worker.outcome import Outcome
from reports.worker.retries import RetryPolicy

log = logging.getLogger(__name__)

FAULT, ANSWERED = "fault", "answered"  # what a call says of the provider
GO, PROBE = "go", "probe"  # a claim let through: as usual, or as the circuit's probe


def _now(clock: Clock | None):
    """Return now as the circuit's instants are kept: the clock's, else the database's."""
    wall = clock.wall() if clock is not None else None
    return wall if wall is not None else Now()


def _past_deadline() -> dict:
    """Return the condition of tasks submitted longer ago than the task deadline (on the
    database's clock, as the runner's own deadline check at the attempt's start)."""
    return {"created_at__lte": Now() - timedelta(seconds=settings.REPORTS_TASK_DEADLINE_S)}


@dataclass(frozen=True)
class Gate:
    """What the circuit lets one claim take, read once inside the claim's transaction."""

    circuit: ProviderCircuit | None
    now: object  # a datetime, or the database's Now()
    probe_due: bool

    @property
    def closed(self) -> bool:
        return self.circuit is None or self.circuit.is_closed

    @property
    def lets_all(self) -> bool:
        """Whether every queued task may be claimed: while closed or when a probe is due."""
        return self.closed or self.probe_due

    def filter(self, queued):
        """Narrow the claimable tasks: all while closed or when a probe is due; else only
        the tasks past their deadline (they end `timeout` without a call)."""
        if self.lets_all:
            return queued
        return queued.filter(**_past_deadline())

    def admit(self, task_id, epoch: int) -> str | None:
        """Return whether the claim of this task (at its new `epoch`) may go on: GO
        while closed, or for a task past its deadline; else PROBE when it took the probe,
        None when another claim took it first."""
        if self.closed or Task.objects.filter(pk=task_id, **_past_deadline()).exists():
            return GO
        circuit = self.circuit
        taken = ProviderCircuit.objects.filter(
            provider=circuit.provider, version=circuit.version
        ).update(
            state=CircuitState.PROBING,
            probe_task_id=task_id,
            probe_epoch=epoch,
            changed_at=self.now,
            version=circuit.version + 1,
        )
        if taken:
            transaction.on_commit(
                lambda: log_event(
                    log,
                    "circuit.probing",
                    provider=circuit.provider,
                    probe_task_id=str(task_id),
                    trips=circuit.trips,
                )
            )
        return PROBE if taken else None


def gate(clock: Clock | None = None) -> Gate:
    """Read the circuit for a claim; call it inside the claim's transaction."""
    now = _now(clock)
    circuit = ProviderCircuit.objects.current()
    if circuit is None or circuit.is_closed:
        return Gate(circuit, now, probe_due=False)
    if circuit.state == CircuitState.OPEN:
        due = ProviderCircuit.objects.filter(
            provider=circuit.provider, version=circuit.version, retry_at__lte=now
        ).exists()
    else:  # probing: the probe's attempt may have ended without telling, or been lost
        due = not Task.objects.filter(
            pk=circuit.probe_task_id, epoch=circuit.probe_epoch, status__in=LEASED
        ).exists()
    return Gate(circuit, now, probe_due=due)


def verdict(outcome: Outcome, *, called: bool, answered: bool) -> str | None:
    """What an attempt's end says of the provider: FAULT (its call failed for the
    provider's own reasons), ANSWERED (the provider answered: text, a heartbeat, a 4xx),
    or None (no call, a cancel before any answer, an unknown outcome)."""
    if not called:
        return None
    if outcome.provider_down:
        return FAULT
    if answered or outcome.provider_answered:
        return ANSWERED
    return None


def after_attempt(
    task_id,
    epoch: int,
    attempt: int,
    outcome: Outcome,
    *,
    called: bool,
    answered: bool,
    clock=None,
) -> Outcome:
    """Tell the circuit how attempt number `attempt` went; return how the attempt ends.

    A call that failed for the provider's own reasons leaves its task queued, waiting,
    whatever attempts it used (`RetryPolicy.while_provider_down`), when the provider looks
    down: its circuit is open (this failure opened it, or it was the probe), or every call
    since this task's first attempt failed for the provider's own reasons (no call of any
    task was answered meanwhile), so the circuit will open before long. A task whose calls
    alone keep failing, while others are answered, ends by the retry table.
    """
    said = verdict(outcome, called=called, answered=answered)
    state, failures = _record(task_id, epoch, said, clock)
    if said == FAULT and (state != CircuitState.CLOSED or failures >= attempt):
        return RetryPolicy.from_settings().while_provider_down(outcome)
    return outcome


def probe_answered(task_id, epoch: int, clock=None) -> None:
    """Close the circuit as soon as the provider answers the probe's call (its response
    began), rather than when the probe's whole report is written."""
    _record(task_id, epoch, ANSWERED, clock)


def _record(task_id, epoch: int, said: str | None, clock) -> tuple[str, int]:
    """Apply what a call said of the provider; return the circuit's state and its
    failures in a row after it."""
    now = _now(clock)
    name = provider_name()
    seen = ProviderCircuit.objects.current()
    if said != FAULT and (seen is None or _change(seen, said, task_id, epoch, now) is None):
        # The common end: nothing to change, and no write lock taken.
        return (CircuitState.CLOSED, 0) if seen is None else (seen.state, seen.failures)
    _ensure(name)
    with transaction.atomic():
        # The row lock (PostgreSQL; SQLite's IMMEDIATE transaction takes the whole file)
        # keeps the workers' counts from overwriting each other.
        circuit = ProviderCircuit.objects.select_for_update().get(provider=name)
        change = _change(circuit, said, task_id, epoch, now) or {}
        if change:
            ProviderCircuit.objects.filter(provider=name).update(
                **change, changed_at=now, version=circuit.version + 1
            )
        state = change.get("state", circuit.state)
        if state != circuit.state:
            transaction.on_commit(lambda: _log_change(circuit, change))
    return state, change.get("failures", circuit.failures)


def _ensure(name: str) -> None:
    """Make the provider's row, once (another worker may make it at the same moment)."""
    if ProviderCircuit.objects.filter(provider=name).exists():
        return
    try:
        with transaction.atomic():
            ProviderCircuit.objects.create(provider=name)
    except IntegrityError:
        pass


def _change(circuit: ProviderCircuit, said: str | None, task_id, epoch: int, now) -> dict | None:
    """Return the fields the circuit changes to after a call said `said`; None: none."""
    probe = (
        circuit.state == CircuitState.PROBING
        and str(circuit.probe_task_id) == str(task_id)
        and circuit.probe_epoch == epoch
    )
    if circuit.is_closed:
        if said == FAULT:
            failures = circuit.failures + 1
            if failures >= settings.REPORTS_BREAKER_FAILURES:
                return _opened(circuit, failures, trips=1, now=now)
            return {"failures": failures}
        if said == ANSWERED and circuit.failures:
            return {"failures": 0}
        return None
    if not probe:  # calls under way when it opened: the probe alone speaks for the provider
        return None
    if said == FAULT:
        return _opened(circuit, circuit.failures + 1, trips=circuit.trips + 1, now=now)
    if said == ANSWERED:
        return {
            "state": CircuitState.CLOSED,
            "failures": 0,
            "trips": 0,
            "retry_at": None,
            "probe_task_id": None,
            "probe_epoch": None,
        }
    # The probe said nothing of the provider: the next claim probes at once.
    return {"state": CircuitState.OPEN, "retry_at": now, "probe_task_id": None, "probe_epoch": None}


def _opened(circuit: ProviderCircuit, failures: int, *, trips: int, now) -> dict:
    return {
        "state": CircuitState.OPEN,
        "failures": failures,
        "trips": trips,
        "opened_total": circuit.opened_total + 1,
        "retry_at": now + timedelta(seconds=cooldown_s(trips)),
        "probe_task_id": None,
        "probe_epoch": None,
    }


def _log_change(before: ProviderCircuit, change: dict) -> None:
    """Log the circuit's new state, once: by the worker whose write changed it."""
    state = change["state"]
    fields = {"provider": before.provider, "was": before.state}
    if state == CircuitState.OPEN:
        retry_at = (
            ProviderCircuit.objects.filter(provider=before.provider)
            .values_list("retry_at", flat=True)
            .first()
        )
        fields.update(
            failures=change.get("failures", before.failures),
            trips=change.get("trips", before.trips),
            retry_at=retry_at.isoformat() if retry_at else None,
        )
    level = logging.WARNING if state == CircuitState.OPEN else logging.INFO
    log_event(log, f"circuit.{state}", level, **fields)
