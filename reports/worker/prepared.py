"""What an attempt finds stored before its call, read in the same trip to the database as
its claim, and what it made of it, stored in one.

Between its claim and the provider's call an attempt needs the task's documents, their
passages, its plan and the notes already written; then it stores the passages and the
plan it made, raises the task's reservation to the calls' worst case and, when the report
is one call, keeps the length of the prompt it is about to send. Each of the two
is a single call on the shared database thread rather than a call a query: every call is
a wait for that thread and a switch back, and the first text waits for all of them
(benchmark 1).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction

from reports import budgets
from reports.parsers.passages import Passage
from reports.parsers.planning import Plan
from reports.worker import leases, plan_store
from reports.worker.leases import Claim, LeaseLost, mark_sent
from reports.worker.plan_store import TaskInput
from reports.worker.preparation import (
    DocumentToRead,
    documents_to_read,
    store_passages,
    stored_passages,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stored:
    """What the task holds when the attempt starts."""

    documents: list[DocumentToRead]
    passages: list[Passage]  # none before the task's first attempt cut its documents
    task: TaskInput
    plan: Plan | None  # None: no plan of the current prompt yet
    notes: dict[str, str]  # the plan's notes already written, by call key


def claim_and_read(worker_id: str, lanes, clock) -> tuple[Claim, Stored | None] | None:
    """Claim a task (`leases.claim_next_task`) and read what it holds, in one trip to the
    shared database thread: the first text waits for each trip (benchmark 1). None when
    there was nothing to claim; the read None when it failed (the attempt reads again, and
    ends the task if that fails too)."""
    claim = leases.claim_next_task(worker_id, lanes, clock)
    if claim is None:
        return None
    try:
        return claim, read_stored(claim)
    except Exception:
        log.exception("reading what task %s holds failed; its attempt reads again", claim.task_id)
        return claim, None


def read_stored(claim: Claim) -> Stored:
    """Read what the attempt needs before it reads documents or calls the provider: the
    task, its documents, their texts kept for the owner, the passages and notes earlier
    attempts stored."""
    task, plan, owner_id = plan_store.stored_task(claim)
    return Stored(
        documents=documents_to_read(claim.task_id, owner_id),
        passages=stored_passages(claim.task_id),
        task=task,
        plan=plan,
        notes=plan_store.finished_notes(claim.task_id) if plan is not None else {},
    )


def store_made(
    claim: Claim,
    worst: list[tuple[int, int]],
    *,
    passages: list[Passage] | None = None,
    plan: Plan | None = None,
    sent_chars: int | None = None,
) -> None:
    """Store the passages and the plan the attempt made (None: it read them), raise the
    reservation to the `worst` case of its calls and, given `sent_chars`, keep the length
    of the report call's prompt about to be sent (`leases.mark_sent`), in one transaction.

    Raise LeaseLost when the lease is gone, budgets.BudgetExhausted when the owner's
    budget cannot cover the calls; either way nothing is stored (a later attempt makes
    them again). Passages another attempt stored first are kept: the cut is the same for
    the same documents.
    """
    with transaction.atomic():
        if passages is not None:
            store_passages(claim.task_id, passages)
        if plan is not None and not plan_store.store_plan(claim, plan):
            raise LeaseLost(claim.task_id)
        budgets.top_up(claim.task_id, claim.epoch, worst)
        if sent_chars is not None and not mark_sent(
            claim.task_id, claim.attempt_id, claim.epoch, sent_chars
        ):
            raise LeaseLost(claim.task_id)
