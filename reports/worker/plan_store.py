"""A task's plan in the database: made once and stored, read back by every later attempt,
and each call's end saved with its notes and usage, fenced by the attempt's epoch.

Short statements only: the plan and the passages are computed before, off the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models.functions import Now

from reports.models import CompiledRead, CompiledUpdate, PlanCall, Status, Task
from reports.parsers.passages import Passage
from reports.parsers.planning import FINAL, PART, Plan, Step
from reports.providers import report_writer
from reports.providers.base import GenerationRequest, SourceDocument, Usage
from reports.providers.prompts import COMBINE, NOTES, PROMPT_VERSION, REPORT
from reports.worker.leases import Claim


@dataclass(frozen=True)
class TaskInput:
    """What every request of a task's plan carries besides what it reads."""

    task_id: str
    attempt_number: int
    instructions: str
    scenario: str


def stored_task(claim: Claim) -> tuple[TaskInput, Plan | None, int]:
    """Return the task's input, the plan an earlier attempt stored (if any, of the
    current prompt) and the task's owner."""
    owner_id, instructions, scenario, stored = _STORED_TASK.rows(claim.task_id)[0]
    current = stored and stored.get("prompt_version") == PROMPT_VERSION
    plan = Plan.from_json(stored) if current else None
    return TaskInput(str(claim.task_id), claim.number, instructions, scenario), plan, owner_id


# Every attempt reads it before its call: compiled once (reports.models.compiled).
_STORED_TASK = CompiledRead(
    lambda task_id: Task.objects.filter(pk=task_id).values_list(
        "owner_id", "instructions", "scenario", "plan"
    ),
    lambda task_id: [(Task._meta.pk, task_id)],
)


def store_plan(claim: Claim, plan: Plan) -> bool:
    """Store a new plan and one row per notes call; False when the lease is gone.
    Inside a caller's transaction (`prepared.store_made`) it takes no savepoint: what
    fails there rolls the whole back."""
    with transaction.atomic(savepoint=False):
        # Fenced as the lease's holder: the update locks the row till its transaction commits.
        stored = {**plan.as_json(), "prompt_version": PROMPT_VERSION}
        if not _STORE_PLAN.count(claim.task_id, claim.epoch, stored):
            return False
        PlanCall.objects.filter(task_id=claim.task_id).delete()  # a plan of an older prompt
        PlanCall.objects.bulk_create(
            PlanCall(
                task_id=claim.task_id,
                key=step.key,
                kind=step.kind,
                position=position,
                first_passage=step.first,
                last_passage=step.last,
                label=step.label,
                prompt_version=PROMPT_VERSION,
            )
            for position, step in enumerate(plan.notes_steps, start=1)
        )
    return True


# Every new task's first attempt stores its plan: compiled once (reports.models.compiled).
_STORE_PLAN = CompiledUpdate(
    lambda task_id, epoch, plan: _held(task_id, epoch),
    lambda task_id, epoch, plan: {"plan": plan},
    lambda task_id, epoch, plan: [
        (Task._meta.get_field("plan"), plan),
        (Task._meta.get_field("epoch"), epoch),  # the ORM's order: by name
        (Task._meta.pk, task_id),
        (Task._meta.get_field("status"), Status.RUNNING),
    ],
)


def finished_notes(task_id) -> dict[str, str]:
    """Return the notes already written for the task's plan, by call key."""
    return dict(
        PlanCall.objects.filter(
            task_id=task_id, status=PlanCall.CallStatus.SUCCEEDED, prompt_version=PROMPT_VERSION
        ).values_list("key", "notes")
    )


@dataclass(frozen=True)
class CallEnd:
    """How one notes call of a plan ended, as its row keeps it."""

    key: str
    succeeded: bool
    notes: str
    error_type: str
    usage: Usage
    cost_micros: int | None
    duration_ms: float
    first_text_ms: float | None


def save_call_end(task_id, epoch: int, attempt_number: int, end: CallEnd) -> bool:
    """Save a notes call's end, its notes and usage, fenced by the attempt's epoch; False
    when the lease is gone (nothing is saved: the notes are not this attempt's to keep)."""
    status = PlanCall.CallStatus.SUCCEEDED if end.succeeded else PlanCall.CallStatus.FAILED
    with transaction.atomic():
        if not _held(task_id, epoch).select_for_update().exists():
            return False
        PlanCall.objects.filter(task_id=task_id, key=end.key).exclude(
            status=PlanCall.CallStatus.SUCCEEDED
        ).update(
            status=status,
            attempt_number=attempt_number,
            notes=end.notes if end.succeeded else "",
            error_type=end.error_type,
            ended_at=Now(),
            duration_ms=end.duration_ms,
            first_text_ms=end.first_text_ms,
            input_tokens=end.usage.input_tokens,
            output_tokens=end.usage.output_tokens,
            cached_tokens=end.usage.cached_tokens,
            usage_source=end.usage.source,
            cost_micros=end.cost_micros,
        )
    return True


def mark_started(task_id, key: str) -> None:
    """Note when a call of the plan was sent (for staff: its row's timings)."""
    PlanCall.objects.filter(task_id=task_id, key=key).exclude(
        status=PlanCall.CallStatus.SUCCEEDED
    ).update(status=PlanCall.CallStatus.RUNNING, started_at=Now())


def _held(task_id, epoch: int):
    """The task, while the attempt at `epoch` holds it."""
    return Task.objects.filter(pk=task_id, epoch=epoch, status=Status.RUNNING)


def ocr_pages_of(documents: Sequence[SourceDocument]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Return the documents' pages read by OCR, as a report's request carries them."""
    return tuple((doc.name, doc.ocr_pages) for doc in documents if doc.ocr_pages)


def request_for(
    task: TaskInput,
    step: Step,
    plan: Plan,
    passages: list[Passage],
    notes: dict[str, str],
    documents: tuple[SourceDocument, ...] = (),
) -> GenerationRequest:
    """Return the request of one call of the plan: what it reads and how much it may write.

    `documents` are the task's, read: the report's call says which pages were read by OCR."""
    read_by_ocr = ocr_pages_of(documents)
    common = {
        "task_id": task.task_id,
        "attempt_number": task.attempt_number,
        "instructions": task.instructions,
        "scenario": task.scenario,
    }
    if plan.single:
        return GenerationRequest(
            **common,
            documents=documents,
            passages=tuple(passages),
            max_output_tokens=plan.report_tokens,
            read_by_ocr=read_by_ocr,
        )
    if step.kind == PART:
        read = tuple(p for p in passages if step.first <= p.number <= step.last)
        return GenerationRequest(
            **common,
            documents=(),
            purpose=NOTES,
            passages=read,
            max_output_tokens=plan.notes_tokens,
        )
    final = step.kind == FINAL
    return GenerationRequest(
        **common,
        documents=(),
        purpose=REPORT if final else COMBINE,
        notes=tuple(notes[key] for key in step.reads),
        max_output_tokens=plan.report_tokens if final else plan.notes_tokens,
        read_by_ocr=read_by_ocr if final else (),
        title=report_writer.title_of(documents, passages) if final else "",
    )
