"""Tasks, their attempts and their event log; every status change goes through `transition`."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.db import models, transaction
from django.db.models import Case, Count, F, Max, Min, OuterRef, Q, Subquery, Sum, When
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, Length, Now
from django.db.models.sql import UpdateQuery

from reports import events
from reports.events import Draft, Event
from reports.models import event_appends
from reports.models.compiled import CompiledInsert, CompiledRead
from reports.states import (
    ADMIN_RESOLUTIONS,
    LEASED,
    TERMINAL,
    TRANSITIONS,
    AttemptStatus,
    CostStatus,
    ErrorType,
    IllegalTransition,
    Lane,
    Status,
)


def db_now_plus(seconds: float):
    """Return a database expression for 'now + seconds', on the database's clock.

    No time added is `Now()` itself: on SQLite, now plus nothing reads back with six digits
    of a second where `Now()` has three ('…:40.744000' against '…:40.744'), and as text the
    first sorts after the second, so a retry due at once was not due until the next
    millisecond."""
    if seconds <= 0:
        return Now()
    return Now() + timedelta(seconds=seconds)


class TaskQuerySet(models.QuerySet):
    def for_user(self, user) -> TaskQuerySet:
        if not user.is_authenticated:
            return self.none()
        return self.filter(owner=user)

    def owned(self, user, task_id) -> Task | None:
        """Return the user's task, or None alike for a missing, foreign or non-UUID id."""
        try:
            uuid.UUID(str(task_id))
        except ValueError:
            return None
        if user is None or not user.is_authenticated:
            return None
        return _OWNED.instance(user.pk, task_id)  # every page, call and socket of a task

    def by_id(self, task_id) -> Task:
        """Return the task, as `get(pk=task_id)` does (raising `Task.DoesNotExist`), its
        read compiled once: every status line of every page reads it."""
        task = _BY_ID.instance(task_id)
        if task is None:
            raise Task.DoesNotExist(f"No task {task_id}.")
        return task

    def placed(self, task_id) -> Task | None:
        """Return the task with its place in line (`with_queue_position`), as a new task's
        answer gives it, its read compiled once."""
        return _PLACED.instance(task_id)

    def with_queue_position(self) -> TaskQuerySet:
        """Annotate `queue_place`: 1 for the next task to be claimed in its lane, 2 for the
        one after it…; None for a task that is not queued. One query for any number of
        tasks: the place is counted in the database (on the claim-order index), per row.

        The order is the claim's as things stand: oldest first, except that the tasks of
        an owner at `REPORTS_USER_MAX_RUNNING` come after the other owners' (`at_cap`).
        With nobody at the cap, the count is of every queued task ahead in the lane. (The
        index does not hold the owner: the count reads each queued row's, a few ms for a
        full queue of 100 on SQLite.)

        Not a window function: the window would have to rank every queued task before
        the caller's filter (the owner's tasks) applies, which the ORM cannot put in one
        query; the correlated count can, and reads only the tasks ahead in the lane.
        """
        in_line = Task.objects.filter(status=Status.QUEUED, lane=OuterRef("lane")).order_by()
        older = Q(created_at__lt=OuterRef("created_at")) | Q(
            created_at=OuterRef("created_at"), pk__lt=OuterRef("pk")
        )
        capped = Q(owner_id__in=Task.objects.at_cap())
        queued = Q(status=Status.QUEUED)
        return self.annotate(
            queue_place=Case(
                # Its owner is at the cap: behind every other owner's, and its own older.
                When(queued & capped, then=_place(in_line.filter(~capped | older))),
                When(queued, then=_place(in_line.filter(older & ~capped))),
                default=None,
            )
        )

    def at_cap(self) -> TaskQuerySet:
        """The owners (their ids) with `REPORTS_USER_MAX_RUNNING` or more live leases: one
        grouped read of the live leases, which are never more than REPORTS_MAX_RUNNING."""
        return (
            self.live_leases()
            .order_by()
            .values("owner_id")
            .annotate(n=Count("pk"))
            .filter(n__gte=settings.REPORTS_USER_MAX_RUNNING)
            .values("owner_id")
        )

    def live_leases(self) -> TaskQuerySet:
        return self.filter(status__in=LEASED, lease_expires_at__gt=Now())

    def expired_leases(self) -> TaskQuerySet:
        return self.filter(status__in=LEASED, lease_expires_at__lte=Now())

    def eligible(self) -> TaskQuerySet:
        """Queued tasks whose retry delay, if any, is over."""
        return self.filter(status=Status.QUEUED).filter(
            Q(not_before__isnull=True) | Q(not_before__lte=Now())
        )

    def transition(
        self,
        task_id,
        frm: str,
        to: str,
        *,
        expect_epoch: int | None = None,
        event: Draft | None = None,
        resolution: bool = False,
        when: Q | None = None,
        **fields,
    ) -> Event | None:
        """Move one task from `frm` to `to` if it is still there; return the event written.

        The one compare-and-set for every status change: the update is conditional on
        the current status (and on the fencing epoch for a worker's writes, and on `when`
        where the caller needs more of the row), and in the same transaction appends the
        event that announces it (by default a `status` event, or a terminal event named
        after a terminal status). Return None when zero rows changed: someone else moved
        the task first, or the row no longer met `when`.

        `resolution`: an administrator's way out of `reconciliation_required`, which
        the table itself never allows (ADMIN_RESOLUTIONS).
        """
        allowed = (
            ADMIN_RESOLUTIONS
            if frm == Status.RECONCILIATION_REQUIRED and resolution
            else TRANSITIONS[frm]
        )
        if to not in allowed:
            raise IllegalTransition(f"{frm} → {to}")
        if event is None:
            event = events.ended(to) if to in TERMINAL else events.status(to)
        condition = Q(pk=task_id, status=frm)
        if expect_epoch is not None:
            condition &= Q(epoch=expect_epoch)
        if when is not None:
            condition &= when
        if to in TERMINAL:
            fields.setdefault("finished_at", Now())
        if to not in LEASED:
            fields.setdefault("lease_expires_at", None)
        # Inside a caller's transaction (a claim, an attempt's end) no savepoint: the
        # update and its event stand or fall with the rest of it.
        with transaction.atomic(savepoint=False):
            row = self.filter(condition)._update_returning(
                {"status": to, "last_seq": F("last_seq") + 1, **fields}, _EVENT_FIELDS
            )
            if row is None:
                return None
            last_seq, attempt_count = row
            data = event.stamped(attempt_count)
            _NEW_EVENT.insert(
                [TaskEvent(task_id=task_id, seq=last_seq, type=event.type, data=data)]
            )
            return Event(task_id, last_seq, event.type, data)

    def _update_returning(self, values: dict, returning: tuple[str, ...]) -> tuple | None:
        """`update(**values)` of at most one row, in one statement that also returns the
        row's `returning` fields as updated (`UPDATE … RETURNING`); None when no row
        changed. A status change took an update and then a read of the event's number.

        Django has no public update that returns rows: this is `update`'s own path ending
        in the compiler's `execute_returning_sql` (Django 6.1; `Model.save` uses it).
        """
        self._for_write = True  # as `update` does: the database routers' write choice
        query = self.query.chain(UpdateQuery)
        query.add_update_values(values)
        fields = [self.model._meta.get_field(name) for name in returning]
        rows = query.get_compiler(self.db).execute_returning_sql(fields)
        return tuple(rows[0]) if rows else None

    def append_event(self, task_id, epoch: int, event: Draft, *, first_text: bool = False):
        """Append an event for a leased task held at `epoch`, renewing its lease.

        Return (event, cancel_requested) or None when the lease was lost.
        """
        return self.append_events([(task_id, epoch, event)], first_text=first_text)[0]

    def append_events(
        self, appends, *, first_text: bool = False
    ) -> list[tuple[Event, bool] | None]:
        """`append_event` for many tasks (each at most once), fenced per task.

        `appends` holds (task_id, epoch, draft). One conditional UPDATE renews every lease
        still held and takes each task's next seq (and with `first_text`, sets the time of
        the task's first text if it has none), and the events of the tasks it updated are
        inserted (`reports.models.event_appends`). Return, per append, (event,
        cancel_requested), or None when that task's lease was lost: its event is not
        written.
        """
        tables = (Task._meta.db_table, TaskEvent._meta.db_table)
        rows = event_appends.append(
            self.db, tables, appends, first_text=first_text, lease_s=settings.REPORTS_LEASE_S
        )
        results: list[tuple[Event, bool] | None] = []
        for (task_id, _, draft), row in zip(appends, rows, strict=True):
            if row is None:
                results.append(None)
                continue
            last_seq, attempt_count, cancel_requested_at = row
            event = Event(task_id, last_seq, draft.type, draft.stamped(attempt_count))
            results.append((event, cancel_requested_at is not None))
        return results


# What a status change's event needs of the task as it changed it: its number, and the
# attempt it belongs to.
_EVENT_FIELDS = ("last_seq", "attempt_count")


class Task(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    status = models.CharField(max_length=32, choices=Status.choices, default=Status.QUEUED)
    lane = models.CharField(max_length=8, choices=Lane.choices, default=Lane.SHORT)
    instructions = models.TextField(blank=True)
    scenario = models.CharField(max_length=32, default="ok")
    # NULL, not "", when absent: the per-owner unique constraint ignores NULLs.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    content_sha256 = models.CharField(max_length=64)
    input_bytes = models.PositiveBigIntegerField(default=0)

    # Wall-clock instants all come from the database's clock (Now()), so intervals
    # between what the web process and a worker wrote never mix two machines' clocks.
    created_at = models.DateTimeField(db_default=Now())
    not_before = models.DateTimeField(null=True, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    first_text_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    frontend_first_text_ms = models.FloatField(null=True, blank=True)

    attempt_count = models.PositiveIntegerField(default=0)
    epoch = models.PositiveBigIntegerField(default=0)
    worker_id = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    last_seq = models.PositiveBigIntegerField(default=0)

    error_type = models.CharField(max_length=32, choices=ErrorType.choices, blank=True)
    # Why the task failed, in the user's words (reports.wording); the provider's own
    # words stay on the attempt (`Attempt.error_message`), for staff.
    user_message = models.TextField(blank=True)
    result_id = models.UUIDField(null=True, blank=True, unique=True)
    result_sha256 = models.CharField(max_length=64, blank=True)
    result_bytes = models.PositiveIntegerField(null=True, blank=True)
    report_html = models.TextField(blank=True)
    # The plan of calls (docs/api.md, "Passages, parts and citations"): None until the
    # parse stage made one; {"parts": N, "rounds": R, "calls": C} — C counts the final
    # call too, so a one-call task is {"parts": 0, "rounds": 0, "calls": 1}.
    plan = models.JSONField(null=True, blank=True)

    # --- observability: the creating request and the task's trace, so a worker's log
    # lines and spans join the web request's (docs/observability.md).
    request_id = models.CharField(max_length=128, blank=True)
    trace_id = models.CharField(max_length=32, blank=True)
    traceparent = models.CharField(max_length=55, blank=True)
    # Budgets and cost (reports/budgets.py): what the task was written with, and its money.
    model = models.CharField(max_length=100, blank=True)
    prompt_version = models.CharField(max_length=32, blank=True)
    cost_status = models.CharField(
        max_length=32, choices=CostStatus.choices, default=CostStatus.NONE
    )
    reserved_micros = models.PositiveBigIntegerField(default=0)  # held on the owner's budget
    cost_micros = models.PositiveBigIntegerField(null=True, blank=True)  # charged when settled

    objects = TaskQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="unique_idempotency_key_per_owner",
            )
        ]
        indexes = [
            models.Index(fields=["status", "lane", "created_at"], name="claim_order"),
            models.Index(fields=["owner", "-created_at"], name="owner_newest"),
            models.Index(fields=["owner", "content_sha256"], name="owner_content"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"

    def _ms_since_created(self, instant) -> float | None:
        if instant is None:
            return None
        return round((instant - self.created_at).total_seconds() * 1000, 1)

    @property
    def queue_ms(self) -> float | None:
        return self._ms_since_created(self.claimed_at)

    @property
    def first_text_ms(self) -> float | None:
        return self._ms_since_created(self.first_text_at)

    @property
    def duration_ms(self) -> float | None:
        return self._ms_since_created(self.finished_at)

    def queue_position(self) -> int | None:
        """Return 1 for the next task to be claimed in its lane, 2 for the one after it…;
        None when the task is not queued."""
        if "queue_place" in self.__dict__:  # read with the task (with_queue_position)
            return self.queue_place
        if self.status != Status.QUEUED:
            return None
        return self.read_queue_position()

    def read_queue_position(self) -> int | None:
        """Return the task's place in line as the table has it now, whatever this
        instance last read of its status (a live page's copy of the task is older than
        the events it has folded since)."""
        # Compared in the database, as stored: on SQLite a Python datetime has another
        # text form than Now() writes, and would compare wrongly within a millisecond.
        row = _PLACE.first(self.pk)  # every queued page's status line: compiled once
        return None if row is None else row[0]


def _place(ahead: TaskQuerySet):
    """1 + the count of `ahead`, as a subquery per row."""
    counted = ahead.values("lane").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted), 0) + 1


class Attempt(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    epoch = models.PositiveBigIntegerField()
    worker_id = models.CharField(max_length=100, blank=True)
    status = models.CharField(
        max_length=32, choices=AttemptStatus.choices, default=AttemptStatus.RUNNING
    )
    error_type = models.CharField(max_length=32, choices=ErrorType.choices, blank=True)
    error_message = models.TextField(blank=True)
    retry_after_s = models.FloatField(null=True, blank=True)
    started_at = models.DateTimeField(db_default=Now())
    ended_at = models.DateTimeField(null=True, blank=True)
    # Measured by the worker's monotonic clock from the attempt's start.
    first_text_ms = models.FloatField(null=True, blank=True)
    stage_ms = models.JSONField(default=dict, blank=True)
    text = models.TextField(blank=True)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    usage_source = models.CharField(max_length=16, blank=True)
    provider_request_id = models.CharField(max_length=200, blank=True)
    prompt_version = models.CharField(max_length=40, blank=True)
    cost_micros = models.PositiveBigIntegerField(null=True, blank=True)  # None: unknown
    # Citations the report named that no passage of the task has: removed at validation.
    removed_citations = models.PositiveIntegerField(default=0)
    # Set while the attempt reads its documents: a worker lost then is blamed on the
    # document, which is not handed to another worker (reports.worker.leases).
    parsing_since = models.DateTimeField(null=True, blank=True)
    # The length of the report call's prompt, set when it is sent: a worker lost while the
    # text streamed is charged an estimate from it and the text received (leases._reap).
    prompt_chars = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["task", "number"]
        constraints = [
            models.UniqueConstraint(fields=["task", "number"], name="unique_attempt_number")
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.task_id}"


class TaskEventQuerySet(models.QuerySet):
    def as_events(self) -> list[Event]:
        """Return the rows as events, read as plain rows: no model instance per event (a
        reload of a long report folds hundreds; building the instances was most of the
        page's time, benchmark 5)."""
        rows = self.values_list("task_id", "seq", "type", "data")
        return [Event(task_id, seq, event_type, data) for task_id, seq, event_type, data in rows]

    def text_lengths(self, task_ids) -> dict[tuple[str, int], int]:
        """Return the characters each attempt of these tasks streamed, keyed by
        (task id as text, attempt number): one query, counted in the database."""
        rows = (
            self.filter(task_id__in=task_ids, type=events.DELTA)
            .annotate(number=KT("data__attempt"))
            .order_by()
            .values("task_id", "number")
            .annotate(length=Sum(Length(KT("data__text"))))
        )
        return {
            (str(row["task_id"]), int(row["number"])): row["length"] or 0
            for row in rows
            if row["number"] is not None
        }

    def text_runs(self, task_id) -> list[dict]:
        """Return the task's text events by attempt, counted in the database: `number`,
        `events`, `chars`, `first_seq`, `first_at` and `last_at` of each."""
        rows = (
            self.filter(task_id=task_id, type=events.DELTA)
            .annotate(number=KT("data__attempt"))
            .order_by()
            .values("number")
            .annotate(
                events=Count("pk"),
                chars=Coalesce(Sum(Length(KT("data__text"))), 0),
                first_seq=Min("seq"),
                first_at=Min("created_at"),
                last_at=Max("created_at"),
            )
        )
        return sorted(rows, key=lambda row: row["first_seq"])

    def without_text(self):
        return self.exclude(type=events.DELTA)

    def attempt_text(self, task_id, number: int) -> str:
        """Return the text an attempt streamed, from its persisted delta events."""
        deltas = self.filter(task_id=task_id, type=events.DELTA).order_by("seq")
        return events.fold(deltas.as_events()).texts_of(number)


class TaskEvent(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=32)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(db_default=Now())

    objects = TaskEventQuerySet.as_manager()

    class Meta:
        ordering = ["task", "seq"]
        constraints = [models.UniqueConstraint(fields=["task", "seq"], name="unique_event_seq")]

    def __str__(self) -> str:
        return f"{self.task_id} #{self.seq} {self.type}"

    def as_event(self) -> Event:
        return Event(self.task_id, self.seq, self.type, self.data)


class Document(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="documents")
    position = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=255)
    extension = models.CharField(max_length=8)
    storage_name = models.CharField(max_length=64, unique=True)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)

    class Meta:
        ordering = ["task", "position"]

    def __str__(self) -> str:
        return self.name


class PreparedText(models.Model):
    """Extracted text of a document, so the same file is not parsed twice."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    sha256 = models.CharField(max_length=64)
    parser_version = models.CharField(max_length=64)
    text = models.TextField()
    # The (1-based) pages of a PDF read by OCR: the report says so.
    ocr_pages = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "sha256", "parser_version"], name="unique_prepared_text"
            )
        ]

    def __str__(self) -> str:
        return f"{self.sha256[:12]} ({self.parser_version})"


# Every status change writes its event: its insert compiled once.
_NEW_EVENT = CompiledInsert(TaskEvent)

_BY_ID = CompiledRead(
    lambda task_id: Task.objects.filter(pk=task_id)[:1], lambda task_id: [(Task._meta.pk, task_id)]
)
_OWNED = CompiledRead(
    lambda owner_id, task_id: Task.objects.filter(owner_id=owner_id, pk=task_id)[:1],
    lambda owner_id, task_id: [(Task._meta.get_field("owner"), owner_id), (Task._meta.pk, task_id)],
)


def live_lease_parameters() -> list:
    """The parameters of `live_leases()` in a compiled read, in the ORM's order."""
    return [(Task._meta.get_field("status"), leased) for leased in LEASED]


def at_cap_parameters() -> list:
    """The parameters of `at_cap()` in a compiled read, in the ORM's order."""
    return [*live_lease_parameters(), (models.IntegerField(), settings.REPORTS_USER_MAX_RUNNING)]


def _place_parameters(task_id) -> list:
    """The parameters of one task's `with_queue_position()` read, in the ORM's order."""
    status, number = Task._meta.get_field("status"), models.IntegerField()
    queued = (status, Status.QUEUED)
    at_cap = at_cap_parameters()
    place = [(number, 0), (number, 1)]  # Coalesce(count, 0) + 1
    task = (Task._meta.pk, task_id)
    return [queued, *at_cap, queued, *at_cap, *place, queued, queued, *at_cap, *place, task]


_PLACE = CompiledRead(
    lambda task_id: (
        Task.objects.filter(pk=task_id).with_queue_position().values_list("queue_place")[:1]
    ),
    _place_parameters,
)
_PLACED = CompiledRead(
    lambda task_id: Task.objects.filter(pk=task_id).with_queue_position()[:1], _place_parameters
)
