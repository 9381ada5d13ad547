"""One attempt of one task: parse → prepare → generate → validate, render, save.

The runner, not the provider, decides what a failure means (the retry table of
docs/providers.md). Every write is fenced by the attempt's epoch: when one changes zero
rows the lease is gone, and the attempt stops without writing anything more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models.functions import Coalesce, Now

from reports import budgets, events, lanes, rendering, storage, wakeups
from reports.clock import Clock
from reports.models import ErrorType, Event, Stage, Status, Task
from reports.observability import tracing
from reports.observability.logs import log_event
from reports.parsers.base import ParseError
from reports.providers.base import (
    Completed,
    GenerationRequest,
    Heartbeat,
    Provider,
    ProviderError,
    Retry,
    SourceDocument,
    TextDelta,
    Usage,
)
from reports.providers.prompts import prompt_chars
from reports.streaming import broadcast
from reports.validation import validate_report
from reports.worker import chunk_writes
from reports.worker.attempt_end import AttemptRecord, Outcome, write_end
from reports.worker.leases import Claim, LeaseLost, mark_parsing
from reports.worker.preparation import build_request, documents_to_read, read_once

log = logging.getLogger(__name__)

FLUSH_INTERVAL_S = 0.1  # coalesce provider deltas into one event about this often…
FLUSH_CHARS = 400  # …or once this many characters are waiting
FIRST_TEXT_UNCOALESCED_S = 0.15  # except for the first text's first moments (benchmark 1)
_END = object()  # the provider's stream ended
_WAKE = object()  # a stop was requested
# PostgreSQL refuses NUL in text and JSON, and no database stores a lone surrogate (a broken
# server can send one as a JSON escape): the model's output drops NUL and shows U+FFFD.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass
class AttemptRun:
    claim: Claim
    provider: Provider
    clock: Clock
    text: list[str] = field(default_factory=list)
    stage_ms: dict[str, float] = field(default_factory=dict)
    first_text_ms: float | None = None
    usage: Usage = field(default_factory=Usage)
    request_id: str = ""
    stop_reason: str = ""  # "cancel" or "lease_lost"
    status: str = Status.RUNNING
    provider_called: bool = False
    prompt_chars: int = 0

    def __post_init__(self) -> None:
        self._answered = False
        self.started = self.clock.monotonic()
        remaining = settings.REPORTS_TASK_DEADLINE_S - self.claim.age_at_claim_s
        self.deadline = self.started + remaining
        # One item of look-ahead: the provider is paced by this runner, and an
        # injected clock cannot run ahead of what the runner has seen.
        self._queue: asyncio.Queue = asyncio.Queue(maxsize=1)
        self._unsent: list[Event] = []  # committed, not yet fanned out
        self._announcing: asyncio.Task | None = None  # fanning them out

    @property
    def task_id(self):
        return self.claim.task_id

    def request_stop(self, reason: str) -> None:
        """Ask the attempt to stop (cancel or lost lease); it wakes at once."""
        if not self.stop_reason:
            self.stop_reason = reason
            with contextlib.suppress(asyncio.QueueFull):  # a full queue wakes it anyway
                self._queue.put_nowait(_WAKE)

    async def run(self) -> str:
        """Run the attempt to its end; return the status the task was left in."""
        wakeups.subscribe(self.task_id, lambda: self.request_stop("cancel"))
        try:
            outcome = await self._stages()
            if outcome.status == Status.FINALIZING:
                outcome = await self._finalize()
            if outcome.status != Status.SUCCEEDED:
                await self._end(outcome)
            return outcome.status
        except LeaseLost:
            log_event(log, "attempt.lease_lost", logging.WARNING, status="lease_lost")
            return "lease_lost"
        except Exception:
            log.exception("attempt of task %s raised", self.task_id)
            return await self._end_raised()
        finally:
            wakeups.unsubscribe(self.task_id)

    async def _end_raised(self) -> str:
        """End an attempt that raised at once, keeping its text, rather than leave its task
        `running` until the reaper finds the lease expired."""
        outcome = Outcome(
            Status.FAILED, ErrorType.WORKER_ERROR, "An internal error stopped the report."
        )
        try:
            await self._end(outcome)
        except LeaseLost:
            return "lease_lost"
        except Exception:  # the database is gone too: the lease expires and the reaper ends it
            log.exception("the end of the attempt of task %s could not be written", self.task_id)
            return "lease_lost"
        return outcome.status

    async def _stages(self) -> Outcome:
        if self.clock.monotonic() >= self.deadline:
            return Outcome(
                Status.FAILED, ErrorType.TIMEOUT, "The task waited in the queue past its deadline."
            )
        with self._timed(Stage.PARSE):
            await self._mark_parsing(True)  # a worker lost from here on blames the document
            try:
                documents = await self._read_documents()
            except ParseError as exc:
                return Outcome(Status.FAILED, ErrorType.INVALID_INPUT, str(exc))
            await self._mark_parsing(False)
        with self._timed(Stage.PREPARE):
            request = await lanes.on_shared_db(build_request)(self.claim, documents)
            try:
                await lanes.on_shared_db(budgets.top_up)(self.task_id, self.claim.epoch, request)
            except budgets.BudgetExhausted as exc:
                return Outcome(Status.FAILED, ErrorType.BUDGET_EXHAUSTED, str(exc))
        with self._timed(Stage.GENERATE):
            self.provider_called = True
            self.prompt_chars = prompt_chars(request)
            return await self._generate(request)

    async def _read_documents(self) -> list[SourceDocument]:
        """Return the task's documents as text, parsing each file at most once per owner.

        Only the read before and the write after use the shared database thread: the
        parse, and the wait for it, would hold up every stream in the process there.
        """
        documents = []
        read: dict[str, str] = {}  # a file given twice is parsed once
        for document in await lanes.on_shared_db(documents_to_read)(self.task_id):
            text = document.text or read.get(document.sha256)
            if text is None:
                text = read[document.sha256] = await read_once(document)
            documents.append(SourceDocument(document.name, text))
        return documents

    async def _mark_parsing(self, parsing: bool) -> None:
        claim = self.claim
        marked = await lanes.on_worker_lane(mark_parsing)(
            claim.task_id, claim.attempt_id, claim.epoch, parsing
        )
        if not marked:
            raise LeaseLost(self.task_id)

    # --- generate ---------------------------------------------------------------------

    async def _generate(self, request: GenerationRequest) -> Outcome:
        pump = asyncio.create_task(self._pump(request))
        try:
            return await self._consume()
        finally:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)

    async def _pump(self, request: GenerationRequest) -> None:
        try:
            # aclosing: a cancelled pump closes the provider's stream (and its connection)
            # at once, not whenever the generator is collected.
            async with contextlib.aclosing(self.provider.stream(request)) as items:
                async for item in items:
                    await self._queue.put(item)
            await self._queue.put(_END)
        except ProviderError as exc:
            await self._queue.put(exc)
        except Exception as exc:  # an adapter bug must end the attempt, not hang it
            log.exception("provider %s raised unexpectedly", self.provider.name)
            await self._queue.put(
                ProviderError(ErrorType.PROVIDER_ERROR, f"Provider failure: {exc}")
            )

    async def _consume(self) -> Outcome:
        self._sent_at = self._last_text_at = self.clock.monotonic()
        self._answered = False
        self._pending: list[str] = []
        self._pending_since = 0.0
        while True:
            item = await self._next_item()
            if self.stop_reason:
                if isinstance(item, TextDelta):
                    self._take(item)  # text that arrived before the stop is kept
                await self._flush()
                return self._stopped()
            overdue = self._overdue(self.clock.monotonic())
            if overdue is not None:
                await self._flush()
                return overdue
            ended = self._take(item)
            if ended is not None:
                await self._flush()
                return ended
            now = self.clock.monotonic()
            if self._pending and (
                # The first text goes out delta by delta: it is what users wait for.
                now - self._first_text_at < FIRST_TEXT_UNCOALESCED_S
                or now >= self._flush_due()
                or sum(map(len, self._pending)) >= FLUSH_CHARS
            ):
                await self._flush()

    # Each limit is an instant, computed one way and compared with `>=` both where it is
    # waited for and where it is checked: `now - start >= limit` can be false at the very
    # instant `start + limit` (floating point), and the wait would then spin at zero.
    def _flush_due(self) -> float:
        return self._pending_since + FLUSH_INTERVAL_S

    def _silence_due(self) -> float:
        """When the provider's silence ends the attempt: no response, or no text (stall)."""
        if self._answered:
            return self._last_text_at + settings.REPORTS_STALL_TIMEOUT_S
        return self._sent_at + settings.REPORTS_PROVIDER_RESPONSE_TIMEOUT_S

    def _checks_due(self) -> list[float]:
        """Return the instants at which a time limit or a flush falls due."""
        due = [self.deadline, self._silence_due()]
        if self._pending:
            due.append(self._flush_due())
        return due

    async def _next_item(self):
        """Return the next stream item, or None when the nearest check falls due first."""
        with contextlib.suppress(asyncio.QueueEmpty):
            return self._queue.get_nowait()  # an item already waiting is never timed out
        timeout = max(0.0, min(self._checks_due()) - self.clock.monotonic())
        try:
            return await asyncio.wait_for(self._queue.get(), timeout=timeout)
        except TimeoutError:
            return None

    def _overdue(self, now: float) -> Outcome | None:
        """Return how the attempt ends when a time limit has passed (heartbeats don't count)."""
        if now >= self.deadline:
            return Outcome(Status.FAILED, ErrorType.TIMEOUT, "The task ran past its deadline.")
        if now < self._silence_due():
            return None
        if not self._answered:
            return Outcome(
                Status.RECONCILIATION_REQUIRED,
                "",
                "The provider did not answer; whether it ran the request is unknown.",
            )
        return Outcome(
            Status.FAILED,
            ErrorType.STALLED,
            f"No text arrived for {settings.REPORTS_STALL_TIMEOUT_S:g} s.",
        )

    def _take(self, item) -> Outcome | None:
        """Take one stream item in; return how the attempt ends when the stream did."""
        if isinstance(item, TextDelta):
            self._answered = True
            text = _UNSTORABLE.sub(lambda m: "" if m[0] == "\x00" else "\ufffd", item.text)
            if text:
                now = self.clock.monotonic()
                self._last_text_at = now
                if self.first_text_ms is None:
                    self.first_text_ms = round((now - self.started) * 1000, 1)
                    log_event(log, "attempt.first_text", first_text_ms=self.first_text_ms)
                    tracing.event("first text", first_text_ms=self.first_text_ms)
                    self._first_text_at = now
                if not self._pending:
                    self._pending_since = now
                self._pending.append(text)
                self.text.append(text)
        elif isinstance(item, Heartbeat):
            self._answered = True
            self.request_id = item.request_id or self.request_id
        elif isinstance(item, Completed):
            self.usage = item.usage
            self.request_id = item.request_id or self.request_id
            return self._completed(item)
        elif item is _END:
            return Outcome(
                Status.FAILED,
                ErrorType.STREAM_TRUNCATED,
                "The stream ended before the report was complete.",
            )
        elif isinstance(item, ProviderError):
            self.request_id = item.request_id or self.request_id
            return self._provider_failed(item)
        return None

    def _stopped(self) -> Outcome:
        if self.stop_reason == "lease_lost":
            raise LeaseLost(self.task_id)
        return Outcome(Status.CANCELLED, "", "Cancelled by you.")

    def _completed(self, done: Completed) -> Outcome:
        if done.finish_reason != "stop":
            return Outcome(
                Status.FAILED,
                ErrorType.STREAM_TRUNCATED,
                f"The provider stopped early (finish reason: {done.finish_reason}).",
            )
        if not "".join(self.text).strip():
            return Outcome(Status.FAILED, ErrorType.EMPTY_OUTPUT, "The provider returned no text.")
        return Outcome(Status.FINALIZING)

    def _provider_failed(self, exc: ProviderError) -> Outcome:
        if exc.retry is Retry.UNKNOWN:
            return Outcome(
                Status.RECONCILIATION_REQUIRED, exc.error_type, exc.message, plain=exc.plain
            )
        delay = exc.retry_after_s or 0.0
        may_retry = (
            exc.retry is Retry.RETRYABLE
            and not self.text
            and self.claim.number < settings.REPORTS_MAX_ATTEMPTS
            and delay <= settings.REPORTS_RETRY_MAX_WAIT_S
            and self.clock.monotonic() + delay < self.deadline
        )
        if may_retry:
            return Outcome(Status.QUEUED, exc.error_type, exc.message, retry_after_s=delay)
        return Outcome(Status.FAILED, exc.error_type, exc.message, plain=exc.plain)

    async def _flush(self) -> None:
        """Persist the waiting text as one delta event (renewing the lease), then fan it out."""
        if not self._pending:
            return
        chunk = "".join(self._pending)
        self._pending.clear()
        written = await chunk_writes.append_event(
            self.task_id,
            self.claim.epoch,
            events.delta(chunk),
            first_text_at=Coalesce("first_text_at", Now()),
        )
        if written is None:
            raise LeaseLost(self.task_id)
        event, cancel_requested = written
        self._announce(event)
        if cancel_requested:
            self.request_stop("cancel")

    # --- finalize -----------------------------------------------------------------------

    async def _finalize(self) -> Outcome:
        await self._move(Status.RUNNING, Status.FINALIZING)
        report = "".join(self.text)
        # Both take most of a second for a report at the size cap: off the event loop.
        with self._timed(Stage.VALIDATE):
            problems = await lanes.in_blocking_pool(validate_report)(
                report, max_kb=settings.REPORTS_MAX_REPORT_KB
            )
        if problems:
            return Outcome(Status.FAILED, ErrorType.VALIDATION_FAILED, " ".join(problems))
        with self._timed(Stage.RENDER):
            html = await lanes.in_blocking_pool(rendering.render_markdown)(report)
        result_id = uuid.uuid4()
        with self._timed(Stage.SAVE):
            try:
                sha256, size = await lanes.in_blocking_pool(storage.save_result)(result_id, report)
            except OSError as exc:
                log.error("saving the report of task %s failed: %s", self.task_id, exc)
                return Outcome(
                    Status.FAILED, ErrorType.SAVE_FAILED, "The report could not be saved."
                )
        try:
            await self._end(
                Outcome(Status.SUCCEEDED),
                result_id=result_id,
                result_sha256=sha256,
                result_bytes=size,
                report_html=html,
            )
        except LeaseLost:
            await lanes.in_blocking_pool(storage.delete_result)(result_id)
            raise
        return Outcome(Status.SUCCEEDED)

    async def _move(self, frm: str, to: str) -> None:
        event = await lanes.on_worker_lane(Task.objects.transition)(
            self.task_id, frm, to, expect_epoch=self.claim.epoch
        )
        if event is None:
            raise LeaseLost(self.task_id)
        self.status = to
        self._announce(event)

    def _announce(self, event: Event) -> None:
        """Fan a committed event out without holding up the stream, after those before it.

        The runner goes back to the provider's text as soon as its chunk is written: with
        Redis, a fan-out is several round trips, and waiting for it held each runner for
        half its stream (benchmark 2, scale-out). One fan-out at a time per attempt keeps
        the order; events committed meanwhile go out together in the next one, so a slow
        layer makes fewer, larger messages rather than a growing queue. The event table
        stays the truth if one is lost.
        """
        self._unsent.append(event)
        if self._announcing is None or self._announcing.done():
            self._announcing = asyncio.create_task(self._send_unsent())

    async def _send_unsent(self) -> None:
        while self._unsent:
            events, self._unsent = self._unsent, []
            await broadcast.publish(events)

    async def _announced(self) -> None:
        """Wait until every event so far has gone out (before the end's own goes)."""
        if self._announcing is not None:
            await asyncio.gather(self._announcing, return_exceptions=True)

    # --- the end ------------------------------------------------------------------------

    async def _end(self, outcome: Outcome, **task_fields) -> None:
        """Write the attempt's end and the task's new status in one transaction."""
        await self._announced()
        if await lanes.on_worker_lane(write_end)(self.record(), outcome, **task_fields) is None:
            raise LeaseLost(self.task_id)

    def record(self) -> AttemptRecord:
        """Return what this attempt leaves behind, as it stands now."""
        return AttemptRecord(
            task_id=self.task_id,
            attempt_id=self.claim.attempt_id,
            number=self.claim.number,
            epoch=self.claim.epoch,
            task_status=self.status,
            text="".join(self.text),
            usage=self.usage,
            stage_ms=dict(self.stage_ms),
            first_text_ms=self.first_text_ms,
            request_id=self.request_id,
            provider_called=self.provider_called,
            answered=self._answered,
            prompt_chars=self.prompt_chars,
            duration_ms=round((self.clock.monotonic() - self.started) * 1000, 1),
        )

    def _timed(self, stage: str):
        return _StageTimer(self, stage)


class _StageTimer:
    def __init__(self, run: AttemptRun, stage: str) -> None:
        self.run, self.stage = run, stage
        self.span = tracing.stage(stage)

    def __enter__(self) -> None:
        self.span.__enter__()
        self.start = self.run.clock.monotonic()

    def __exit__(self, *exc) -> None:
        elapsed = round((self.run.clock.monotonic() - self.start) * 1000, 1)
        self.run.stage_ms[self.stage] = elapsed
        log_event(
            log,
            "stage.ended",
            stage=self.stage,
            status="raised" if exc[0] else "ok",
            duration_ms=elapsed,
        )
        self.span.__exit__(*exc)
