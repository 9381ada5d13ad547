"""The one door for a task's birth: a checked submission becomes a queued task, with
idempotency, admission control and the budget (the request is read into a submission by
reports/submissions/form.py).

Everything that can reject a submission does so before anything is stored, except the
budget reservation, which is made in the transaction that creates the task; when it is
refused, that transaction rolls back and the stored files are deleted, so a rejected
upload leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from dataclasses import dataclass
from functools import cached_property

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from reports import budgets, storage, wakeups
from reports.auth import ApiError, storage_unavailable
from reports.models import (
    TERMINAL,
    CompiledInsert,
    CompiledRead,
    CostStatus,
    Document,
    Lane,
    Status,
    Task,
)
from reports.observability import logs, task_logs, tracing
from reports.providers import SCENARIOS
from reports.providers.prompts import PROMPT_VERSION
from reports.submissions import limits

# Any fixed number, other than the worker's claim lock: every creation takes this one.
ADMISSION_LOCK = 7_240_502
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Upload:
    name: str
    extension: str
    data: bytes

    @cached_property  # an upload may be 10 MB: hash it once
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True)
class Submission:
    uploads: tuple[Upload, ...]
    instructions: str
    scenario: str
    idempotency_key: str | None
    reuse: bool = False  # answer with an earlier report of the same content, when there is one

    @cached_property  # read by reuse, replay and create: the whole request hashed once
    def fingerprint(self) -> str:
        """Return the digest of what an idempotency key is bound to (docs/api.md)."""
        digest = hashlib.sha256()
        for upload in self.uploads:
            digest.update(len(upload.data).to_bytes(8, "big"))
            digest.update(upload.data)
        for text in (self.instructions, self.scenario):
            encoded = text.encode()
            digest.update(len(encoded).to_bytes(8, "big"))
            digest.update(encoded)
        return digest.hexdigest()


def check_scenario(scenario: str) -> None:
    """Raise ApiError 400 for a scenario this server does not run."""
    if scenario != "ok" and not settings.REPORTS_ALLOW_SCENARIOS:
        raise ApiError(400, "invalid_request", "Scenarios are not enabled on this server.")
    if scenario not in SCENARIOS:
        raise ApiError(
            400, "invalid_request", f"Unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}."
        )


def submit(user, submission: Submission) -> tuple[Task, bool]:
    """Create the task, or find the one this idempotency key already made.

    Return (task, replayed). The key is bound in the same transaction that creates
    the task, so concurrent duplicates make one task: the loser of the race sees the
    winner's row and replays it.
    """
    existing = _replay(user, submission)
    if existing is not None:
        return existing, True
    # Refuse a flood before its files touch the disk; the check that holds is the one
    # repeated under the admission lock, in the transaction that inserts the task.
    size = sum(len(u.data) for u in submission.uploads)
    limits.check(user, size)
    names = _store_uploads(submission)
    try:
        with transaction.atomic():
            _lock_admission()
            limits.check(user, size)
            task = _create(user, submission, names)
            # Idle supervisors hear of the task once it is committed: in other
            # processes through the database, in this one directly.
            wakeups.announce_new_task()
            transaction.on_commit(lambda: wakeups.notify(wakeups.NEW_TASK))
    except IntegrityError:
        storage.delete_uploads(names)
        existing = _replay(user, submission)
        if existing is None:
            raise
        return existing, True
    except BaseException:
        storage.delete_uploads(names)
        raise
    logs.log_event(
        log,
        "task.admitted",
        **task_logs.task_fields(task),
        files=len(submission.uploads),
        input_bytes=task.input_bytes,
    )
    return task, False


def earlier_result(user, submission: Submission) -> Task | None:
    """Return the user's succeeded task that already answers this submission, if any.

    The same documents (bytes, in order), instructions and scenario — what the content
    fingerprint covers — written by the same model with the same prompt version. Never
    another user's; only when the submission asks for reuse; and never in place of a
    task this idempotency key already made, which is replayed instead (docs/api.md).
    """
    if not submission.reuse or _replay(user, submission) is not None:
        return None
    return (
        Task.objects.filter(
            owner=user,
            status=Status.SUCCEEDED,
            content_sha256=submission.fingerprint,
            model=settings.REPORTS_MODEL,
            prompt_version=PROMPT_VERSION,
        )
        .order_by("-finished_at")
        .first()
    )


def key_used(user, idempotency_key: str) -> bool:
    """Tell whether this user's idempotency key already made a task (a replay, not a new one)."""
    return _KEY_USED.first(user.pk, idempotency_key) is not None


def _replay(user, submission: Submission) -> Task | None:
    if submission.idempotency_key is None:
        return None
    task = _KEYED.instance(user.pk, submission.idempotency_key)
    if task is not None and task.content_sha256 != submission.fingerprint:
        raise ApiError(
            422,
            "idempotency_key_reused",
            "This Idempotency-Key was already used for a different upload.",
        )
    return task


def _keyed(owner_id, key):
    return Task.objects.filter(owner_id=owner_id, idempotency_key=key)


def _key_parameters(owner_id, key) -> list:
    return [
        (Task._meta.get_field("idempotency_key"), key),  # the ORM's order: by name
        (Task._meta.get_field("owner"), owner_id),
    ]


# Every upload through the page looks its key up, twice: compiled once. Whether it was
# used reads no more than the task's id (a task's row holds its report).
_KEYED = CompiledRead(lambda owner_id, key: _keyed(owner_id, key)[:1], _key_parameters)
_KEY_USED = CompiledRead(
    lambda owner_id, key: _keyed(owner_id, key).values_list("pk")[:1], _key_parameters
)


# Every upload inserts its task and its documents: compiled once.
_NEW_TASK = CompiledInsert(Task)
_NEW_DOCUMENTS = CompiledInsert(Document)


def _lock_admission() -> None:
    """Serialise task creation until the caller's transaction ends, so that the counts of
    `limits.check` and the insert they allow are one step: no number of
    parallel requests can run past either limit.

    PostgreSQL: one advisory transaction lock for every creation (the queue limit is
    global, so a per-user lock would not be enough). SQLite: nothing to add, as every
    transaction is IMMEDIATE (project/settings.py) and so already holds the one write lock.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ADMISSION_LOCK])


def _store_uploads(submission: Submission) -> list[str]:
    """Store every file of the submission, or none: a store that fails is a 503."""
    names: list[str] = []
    try:
        for u in submission.uploads:
            names.append(storage.save_upload(u.data))
    except OSError:
        log.exception("storing an upload failed")
        with contextlib.suppress(OSError):  # what did get stored goes if the store allows
            storage.delete_uploads(names)
        raise storage_unavailable("file store") from None
    return names


def _create(user, submission: Submission, storage_names: list[str]) -> Task:
    size = sum(len(u.data) for u in submission.uploads)
    held = budgets.reservation(settings.REPORTS_MODEL, size, submission.instructions)
    try:
        budgets.reserve(user, held)
    except budgets.BudgetExhausted as exc:
        raise ApiError(402, "budget_exhausted", str(exc)) from None
    task = Task(
        owner=user,
        lane=Lane.LONG if size > settings.REPORTS_LONG_LANE_BYTES else Lane.SHORT,
        instructions=submission.instructions,
        scenario=submission.scenario,
        idempotency_key=submission.idempotency_key,
        content_sha256=submission.fingerprint,
        input_bytes=size,
        **tracing.task_trace_fields(),
        model=settings.REPORTS_MODEL,
        prompt_version=PROMPT_VERSION,
        cost_status=CostStatus.RESERVED,
        reserved_micros=held,
    )
    _NEW_TASK.insert([task])
    _NEW_DOCUMENTS.insert(
        [
            Document(
                task=task,
                position=i,
                name=u.name,
                extension=u.extension,
                storage_name=name,
                size=len(u.data),
                sha256=u.sha256,
            )
            for i, (u, name) in enumerate(zip(submission.uploads, storage_names, strict=True))
        ]
    )
    return task


def resubmission(
    task: Task, idempotency_key: str | None, instructions: str | None = None
) -> Submission:
    """Return a new submission of an ended task's stored documents, for a retry.

    `instructions`, when given, replace the task's own. Raise ApiError 409 while the task
    has not ended: its documents are still being read, and a second run would race it.
    """
    if task.status not in TERMINAL:
        raise ApiError(409, "task_not_finished", f"The task has not ended yet: {task.status}.")
    if task.scenario != "ok" and not settings.REPORTS_ALLOW_SCENARIOS:
        # The server turned scenarios off since: the caller asked for none, so say whose.
        raise ApiError(
            400,
            "invalid_request",
            f"This task ran the scenario {task.scenario!r}, which this server no longer "
            "allows; upload its documents again to make a new task.",
        )
    check_scenario(task.scenario)
    try:
        uploads = tuple(
            Upload(d.name, d.extension, storage.read_upload(d.storage_name))
            for d in task.documents.order_by("position")
        )
    except OSError:
        log.exception("reading a stored upload failed")
        raise storage_unavailable("file store") from None
    if instructions is None:
        instructions = task.instructions
    return Submission(uploads, instructions, task.scenario, idempotency_key)
