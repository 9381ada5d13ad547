"""The end of an attempt: how it ended (`Outcome`), what it leaves behind
(`AttemptRecord`), and the one write that records both.

An attempt that ends its task goes through `lifecycle.end_task`; one that leaves its
task for another attempt (a retry) through `lifecycle.requeue_task`. Either way the
attempt's end, the task's new status and event, and the money are one transaction.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from functools import partial

from django.conf import settings

from reports import budgets, events, lifecycle
from reports.clock import Clock
from reports.models import PROVIDER_FAILURES, AttemptStatus, Event, Status, db_now_plus
from reports.observability import tracing
from reports.observability.logs import log_event
from reports.providers.base import Usage
from reports.providers.prompts import PROMPT_VERSION, estimated_usage
from reports.worker import breaker
from reports.worker.outcome import Outcome

# The attempt's lines keep one logger name, whichever module writes them.
log = logging.getLogger("reports.worker.pipeline")

ATTEMPT_STATUS = {  # the task status an attempt ends in → the attempt's own status
    Status.QUEUED: AttemptStatus.RETRY_SCHEDULED,
    Status.SUCCEEDED: AttemptStatus.SUCCEEDED,
    Status.FAILED: AttemptStatus.FAILED,
    Status.CANCELLED: AttemptStatus.CANCELLED,
    Status.RECONCILIATION_REQUIRED: AttemptStatus.RECONCILIATION_REQUIRED,
}


@dataclass(frozen=True)
class AttemptRecord:
    """What an attempt leaves behind when it ends."""

    task_id: object
    attempt_id: object
    number: int
    epoch: int
    model: str  # the task's, which prices the attempt
    task_status: str  # where the attempt holds its task: running or finalizing
    text: str
    usage: Usage
    stage_ms: dict[str, float]
    first_text_ms: float | None
    request_id: str
    provider_called: bool  # the request was sent to the provider
    answered: bool  # the provider answered it (text or a heartbeat)
    duration_ms: float
    prompt_chars: int = 0  # the length of the prompt sent, once one was
    removed_citations: int = 0  # citation ids the report's finalization took out
    # The usage of the plan's notes calls this attempt made before its report's call, each
    # already as charged (`call_usage`); notes reused from an earlier attempt are not here.
    notes_usage: tuple[Usage, ...] = ()
    output_cap: int | None = None  # the report call's output cap, once it was sent


def write_end(
    record: AttemptRecord, outcome: Outcome, *, clock: Clock | None = None, **task_fields
) -> Event | None:
    """Write the attempt's end, the task's new status and event, and the money, in one
    transaction fenced by the attempt's epoch; return None when the lease is gone.

    First the provider's circuit hears what the call said of the provider, which may
    leave the task waiting for it (`reports.worker.breaker`; `clock` is the circuit's).
    Once it commits, the `attempt.ended` line is logged (before the task's own
    `task.ended`, when the attempt ended it).
    """
    outcome = breaker.after_attempt(
        record.task_id,
        record.epoch,
        record.number,
        outcome,
        called=record.provider_called,
        answered=record.answered,
        clock=clock,
    )
    record = dataclasses.replace(record, usage=usage_at_end(record, outcome))
    attempt = lifecycle.AttemptEnd(
        record.attempt_id,
        {
            "status": ATTEMPT_STATUS[outcome.status],
            "error_type": outcome.error_type,
            "error_message": outcome.message,
            "retry_after_s": outcome.retry_after_s,
            "text": record.text,
            "first_text_ms": record.first_text_ms,
            "stage_ms": record.stage_ms,
            "input_tokens": record.usage.input_tokens,
            "output_tokens": record.usage.output_tokens,
            "cached_tokens": record.usage.cached_tokens,
            "usage_source": record.usage.source,
            "provider_request_id": record.request_id,
            "removed_citations": record.removed_citations,
            "cost_micros": budgets.attempt_cost_of(
                record.task_id,
                record.model,
                record.usage,
                billed_nothing=billed_nothing(record, outcome),
            ),
        },
        log=partial(log_end, record, outcome),
    )
    if outcome.status == Status.QUEUED:
        return lifecycle.requeue_task(
            record.task_id,
            record.task_status,
            events.requeued(retry_after_s=outcome.retry_after_s, reason=outcome.error_type),
            expect_epoch=record.epoch,
            attempt=attempt,
            not_before=db_now_plus(outcome.retry_after_s or 0),
            **task_fields,
        )
    task_fields.setdefault("error_type", outcome.error_type)
    # The provider's own words stay on the attempt, for staff (reports.wording).
    task_fields.setdefault("user_message", outcome.user_message)
    return lifecycle.end_task(
        record.task_id,
        record.task_status,
        events.ended(
            outcome.status,
            error_type=outcome.error_type,
            message=outcome.user_message,
            partial=bool(record.text),
            result_id=task_fields.get("result_id"),
        ),
        expect_epoch=record.epoch,
        attempt=attempt,
        **task_fields,
    )


def usage_at_end(record: AttemptRecord, outcome: Outcome) -> Usage:
    """Return the usage the attempt is charged at: its report call's (`call_usage`) and
    its notes calls' together."""
    unknown = outcome.status == Status.RECONCILIATION_REQUIRED
    report = call_usage(
        record.usage,
        answered=record.answered,
        unknown=unknown,
        prompt_chars=record.prompt_chars,
        text=record.text,
        output_cap=record.output_cap,
    )
    if not record.notes_usage:
        return report
    # Which call's outcome is unknown is not kept: an admin settles the attempt whole.
    return Usage() if unknown else sum_usage([*record.notes_usage, report])


def call_usage(
    usage: Usage,
    *,
    answered: bool,
    unknown: bool,
    prompt_chars: int,
    text: str,
    output_cap: int | None = None,
):
    """Return the usage one provider call is charged at.

    The provider's own report when it gave one; when it answered and reported none (a
    cancel, a dropped stream, a server that never sends usage), an estimate from the
    prompt sent and the text received. An outcome that is itself unknown (no answer came)
    keeps its usage unknown, for an admin to settle. Either way its output is charged at
    most at `output_cap`, the cap the request asked for and the reservation covers: a
    provider that wrote past it was cut off (attempt_core.cap_chars).
    """
    if usage.source == "missing" and answered and not unknown:
        usage = estimated_usage(prompt_chars, text)
    if output_cap is not None and (usage.output_tokens or 0) > output_cap:
        usage = dataclasses.replace(usage, output_tokens=output_cap)
    return usage


def sum_usage(usages: list[Usage]) -> Usage:
    """Return the usage of several calls together. A call still without usage at its end
    (`call_usage`) was never answered: refused, or never sent, it billed nothing."""
    counted = [u for u in usages if u.source != "missing"]
    if not counted:
        return Usage()
    return Usage(
        input_tokens=sum(u.input_tokens or 0 for u in counted),
        output_tokens=sum(u.output_tokens or 0 for u in counted),
        cached_tokens=sum(u.cached_tokens or 0 for u in counted),
        source="estimate" if any(u.source == "estimate" for u in counted) else "provider",
    )


def billed_nothing(record: AttemptRecord, outcome: Outcome) -> bool:
    """Whether the provider certainly billed this attempt nothing: it was never called,
    or it refused the request before answering (PROVIDER_FAILURES)."""
    if not record.provider_called:
        return True
    return (
        not record.answered
        and outcome.status != Status.RECONCILIATION_REQUIRED
        and outcome.error_type in PROVIDER_FAILURES
    )


def log_end(record: AttemptRecord, outcome: Outcome, status: str, task_status: str) -> None:
    """Write the `attempt.ended` line, with the attempt's and the task's `status` and
    `task_status` as its end wrote them, and annotate the attempt's trace span."""
    usage = {
        "input_tokens": record.usage.input_tokens,
        "output_tokens": record.usage.output_tokens,
        "cached_tokens": record.usage.cached_tokens,
        "usage_source": record.usage.source,
    }
    log_event(
        log,
        "attempt.ended",
        attempt=record.number,
        status=status,
        task_status=task_status,
        error_type=outcome.error_type or None,
        retry_after_s=outcome.retry_after_s,
        first_text_ms=record.first_text_ms,
        duration_ms=record.duration_ms,
        stage_ms=record.stage_ms,
        **usage,
        model=settings.REPORTS_MODEL,
        prompt_version=PROMPT_VERSION,
        provider_request_id=record.request_id or None,
    )
    tracing.annotate(
        **{"reportline.status": task_status, "reportline.error_type": outcome.error_type},
        **{f"gen_ai.usage.{k}": v for k, v in usage.items() if k.endswith("tokens")},
    )
