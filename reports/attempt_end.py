"""The end of an attempt: one transaction writes the attempt's end, the task's new status
and its event, and settles the cost; then the `attempt.ended` log line.

`reports.pipeline.AttemptRun._end` calls these with the run that ended.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from reports import budgets, tracing
from reports.logs import log_event
from reports.models import TERMINAL, Attempt, Event, Status, Task, db_now_plus
from reports.prompts import PROMPT_VERSION

if TYPE_CHECKING:
    from reports.pipeline import AttemptRun, Outcome

# The attempt's lines keep one logger name, whichever module writes them.
log = logging.getLogger("reports.pipeline")

ATTEMPT_STATUS = {  # the task status an attempt ends in → the attempt's own outcome
    Status.QUEUED: Attempt.Outcome.RETRY_SCHEDULED,
    Status.SUCCEEDED: Attempt.Outcome.SUCCEEDED,
    Status.FAILED: Attempt.Outcome.FAILED,
    Status.CANCELLED: Attempt.Outcome.CANCELLED,
    Status.RECONCILIATION_REQUIRED: Attempt.Outcome.RECONCILIATION_REQUIRED,
}


def end_event(outcome: Outcome, partial: bool, task_fields: dict) -> tuple[str, dict]:
    """Return the task event an attempt's end writes (SPEC's event types)."""
    if outcome.status == Status.SUCCEEDED:
        return ("succeeded", {"result_id": str(task_fields["result_id"])})
    if outcome.status == Status.QUEUED:
        return (
            "status",
            {
                "status": Status.QUEUED,
                "retry_after_s": outcome.retry_after_s,
                "reason": outcome.error_type,
            },
        )
    if outcome.status == Status.CANCELLED:
        return ("cancelled", {"partial": partial})
    if outcome.status == Status.FAILED:
        return (
            "failed",
            {"error_type": outcome.error_type, "partial": partial, "message": outcome.message},
        )
    return (outcome.status, {"partial": partial, "message": outcome.message})


def write_end(run: AttemptRun, outcome: Outcome, task_fields: dict) -> Event | None:
    """Write the attempt's end, the task's new status and event, and settle the cost, in
    one transaction fenced by the attempt's epoch; return None when the lease is gone."""
    text = "".join(run.text)
    event = end_event(outcome, bool(text), task_fields)
    if outcome.status == Status.QUEUED:
        task_fields["not_before"] = db_now_plus(outcome.retry_after_s or 0)
    else:
        task_fields.setdefault("error_type", outcome.error_type)
        task_fields.setdefault("error_message", outcome.message)
    with transaction.atomic():
        written = Task.objects.transition(
            run.task_id,
            run.status,
            outcome.status,
            expect_epoch=run.claim.epoch,
            event=event,
            **task_fields,
        )
        if written is None:
            return None
        Attempt.objects.filter(pk=run.claim.attempt_id).update(
            status=ATTEMPT_STATUS[outcome.status],
            error_type=outcome.error_type,
            error_message=outcome.message,
            retry_after_s=outcome.retry_after_s,
            ended_at=Now(),
            text=text,
            first_text_ms=run.first_text_ms,
            stage_ms=run.stage_ms,
            input_tokens=run.usage.input_tokens,
            output_tokens=run.usage.output_tokens,
            cached_tokens=run.usage.cached_tokens,
            usage_source=run.usage.source,
            provider_request_id=run.request_id,
            cost_micros=budgets.attempt_cost_of(
                run.task_id, run.usage, billed_nothing=billed_nothing(run, outcome)
            ),
        )
        if outcome.status in TERMINAL:
            budgets.task_ended(run.task_id)
        return written


def billed_nothing(run: AttemptRun, outcome: Outcome) -> bool:
    """Whether the provider certainly billed this attempt nothing: it was never called,
    or it refused the request before answering (budgets.REFUSALS)."""
    if "generate" not in run.stage_ms:
        return True
    return (
        not run._answered
        and outcome.status != Status.RECONCILIATION_REQUIRED
        and outcome.error_type in budgets.REFUSALS
    )


def log_end(run: AttemptRun, outcome: Outcome) -> None:
    """Write the `attempt.ended` line and annotate the attempt's trace span."""
    usage = {
        "input_tokens": run.usage.input_tokens,
        "output_tokens": run.usage.output_tokens,
        "cached_tokens": run.usage.cached_tokens,
        "usage_source": run.usage.source,
    }
    log_event(
        log,
        "attempt.ended",
        attempt=run.claim.number,
        status=ATTEMPT_STATUS[outcome.status],
        task_status=outcome.status,
        error_type=outcome.error_type or None,
        retry_after_s=outcome.retry_after_s,
        first_text_ms=run.first_text_ms,
        duration_ms=round((run.clock.monotonic() - run.started) * 1000, 1),
        stage_ms=run.stage_ms,
        **usage,
        model=settings.REPORTS_MODEL,
        prompt_version=PROMPT_VERSION,
        provider_request_id=run.request_id or None,
    )
    tracing.annotate(
        **{"reportline.status": outcome.status, "reportline.error_type": outcome.error_type},
        **{f"gen_ai.usage.{k}": v for k, v in usage.items() if k.endswith("tokens")},
    )
