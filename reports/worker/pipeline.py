"""One attempt of one task: parse → prepare → generate → validate, render, save.

The shell around the attempt core (`reports.worker.attempt_core`): it sequences the
stages, does the I/O off the event loop (reports/threads.py), pumps the provider's stream into the
core, carries out the core's decisions — fenced chunk writes, then their fan-out in order —
and writes the attempt's end. What a stream item, a silence or a failure means is the
core's to say, and the retry table's (`reports.worker.retries`). Every write is fenced by
the attempt's epoch: when one changes zero rows the lease is gone, and the attempt stops
without writing anything more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db.models.functions import Coalesce, Now

from reports import budgets, events, rendering, storage, threads, wakeups
from reports.clock import Clock
from reports.models import ErrorType, Event, SourcePassage, Stage, Status, Task
from reports.observability import tracing
from reports.observability.logs import log_event
from reports.parsers.base import ParseError
from reports.providers.base import (
    GenerationRequest,
    Provider,
    ProviderError,
    SourceDocument,
    Usage,
)
from reports.providers.prompts import prompt_chars
from reports.streaming import broadcast
from reports.validation import settle_citations, validate_report
from reports.worker import attempt_core, chunk_writes
from reports.worker.attempt_core import (
    Abandon,
    Call,
    Decision,
    End,
    Limits,
    StreamEnded,
    Write,
)
from reports.worker.attempt_end import AttemptRecord, write_end
from reports.worker.leases import Claim, LeaseLost, mark_parsing
from reports.worker.outcome import Outcome
from reports.worker.preparation import build_request, documents_to_read, read_once
from reports.worker.retries import RetryPolicy

log = logging.getLogger(__name__)

_WAKE = object()  # a stop was requested


@dataclass(frozen=True)
class RunResult:
    """How `AttemptRun.run` ended: the status it left its task in, or None when the lease
    was lost (the attempt stopped and wrote nothing more; whoever holds the task ends it)."""

    status: str | None

    @property
    def lease_lost(self) -> bool:
        return self.status is None


LOST = RunResult(None)  # the lease was lost


class AttemptRun:
    def __init__(self, claim: Claim, provider: Provider, clock: Clock) -> None:
        self.claim = claim
        self.provider = provider
        self.clock = clock
        self.started = clock.monotonic()
        remaining = settings.REPORTS_TASK_DEADLINE_S - claim.age_at_start_s
        self.limits = Limits(
            deadline=self.started + remaining,
            response_timeout_s=settings.REPORTS_PROVIDER_RESPONSE_TIMEOUT_S,
            stall_timeout_s=settings.REPORTS_STALL_TIMEOUT_S,
            attempt=claim.number,
            retries=RetryPolicy.from_settings(),
        )
        self.status: str = Status.RUNNING  # where the attempt holds its task
        self.stage_ms: dict[str, float] = {}
        self.stop_reason = ""  # attempt_core.CANCEL or LEASE_LOST, once asked to stop
        self.call: Call | None = None  # the provider call, once the request is sent
        self.prompt_chars = 0
        self.removed_citations = 0  # citation ids naming no passage, taken out of the report
        self.first_text_ms: float | None = None
        # One item of look-ahead: the provider is paced by this runner, and an
        # injected clock cannot run ahead of what the runner has seen.
        self._queue: asyncio.Queue = asyncio.Queue(maxsize=1)
        self._unsent: list[Event] = []  # committed, not yet fanned out
        self._announcing: asyncio.Task | None = None  # fanning them out

    @property
    def task_id(self):
        return self.claim.task_id

    @property
    def text(self) -> str:
        return self.call.text if self.call is not None else ""

    def request_stop(self, reason: str) -> None:
        """Ask the attempt to stop (cancel or lost lease); it wakes at once."""
        if self.stop_reason:
            return
        self.stop_reason = reason
        if self.call is not None:
            self.call.stop(reason)
        with contextlib.suppress(asyncio.QueueFull):  # a full queue wakes it anyway
            self._queue.put_nowait(_WAKE)

    async def run(self) -> RunResult:
        """Run the attempt to its end; return the status it left its task in."""
        wakeups.subscribe(self.task_id, lambda: self.request_stop(attempt_core.CANCEL))
        try:
            outcome = await self._stages()
            if outcome.status == Status.FINALIZING:
                outcome = await self._finalize()
            if outcome.status != Status.SUCCEEDED:
                await self._end(outcome)
            return RunResult(outcome.status)
        except LeaseLost:
            log_event(log, "attempt.lease_lost", logging.WARNING, status="lease_lost")
            return LOST
        except Exception:
            log.exception("attempt of task %s raised", self.task_id)
            return await self._end_raised()
        finally:
            wakeups.unsubscribe(self.task_id)

    async def _end_raised(self) -> RunResult:
        """End an attempt that raised at once, keeping its text, rather than leave its task
        `running` until the reaper finds the lease expired."""
        outcome = Outcome(
            Status.FAILED, ErrorType.WORKER_ERROR, "An internal error stopped the report."
        )
        try:
            await self._end(outcome)
        except LeaseLost:
            return LOST
        except Exception:  # the database is gone too: the lease expires and the reaper ends it
            log.exception("the end of the attempt of task %s could not be written", self.task_id)
            return LOST
        return RunResult(outcome.status)

    async def _stages(self) -> Outcome:
        late = attempt_core.past_deadline_at_start(self.limits, self.clock.monotonic())
        if late is not None:
            return late
        with self._timed(Stage.PARSE):
            await self._mark_parsing(True)  # a worker lost from here on blames the document
            try:
                documents = await self._read_documents()
            except ParseError as exc:
                return Outcome(Status.FAILED, ErrorType.INVALID_INPUT, str(exc))
            await self._mark_parsing(False)
        with self._timed(Stage.PREPARE):
            request = await threads.on_shared_db(build_request)(self.claim, documents)
            try:
                await threads.on_shared_db(budgets.top_up)(self.task_id, self.claim.epoch, request)
            except budgets.BudgetExhausted as exc:
                return Outcome(Status.FAILED, ErrorType.BUDGET_EXHAUSTED, str(exc))
        with self._timed(Stage.GENERATE):
            self.prompt_chars = prompt_chars(request)
            return await self._generate(request)

    async def _read_documents(self) -> list[SourceDocument]:
        """Return the task's documents as text, parsing each file at most once per owner.

        Only the read before and the write after use the shared database thread: the
        parse, and the wait for it, would hold up every stream in the process there.
        """
        documents = []
        read: dict[str, str] = {}  # a file given twice is parsed once
        for document in await threads.on_shared_db(documents_to_read)(self.task_id):
            text = document.text or read.get(document.sha256)
            if text is None:
                text = read[document.sha256] = await read_once(document)
            documents.append(SourceDocument(document.name, text))
        return documents

    async def _mark_parsing(self, parsing: bool) -> None:
        claim = self.claim
        marked = await threads.on_worker_thread(mark_parsing)(
            claim.task_id, claim.attempt_id, claim.epoch, parsing
        )
        if not marked:
            raise LeaseLost(self.task_id)

    # --- generate: one provider call, run by the core ----------------------------------

    async def _generate(self, request: GenerationRequest) -> Outcome:
        """Send the request and carry out the core's decisions until it ends the call."""
        call = self.call = Call(self.limits, sent_at=self.clock.monotonic())
        if self.stop_reason:
            call.stop(self.stop_reason)
        pump = asyncio.create_task(self._pump(request))
        try:
            while True:
                for decision in await self._next_decisions(call):
                    if isinstance(decision, Write):
                        await self._write(decision.text)
                    elif isinstance(decision, End):
                        return decision.outcome
                    elif isinstance(decision, Abandon):
                        raise LeaseLost(self.task_id)
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
            await self._queue.put(StreamEnded())
        except ProviderError as exc:
            await self._queue.put(exc)
        except Exception as exc:  # an adapter bug must end the call, not hang it
            log.exception("provider %s raised unexpectedly", self.provider.name)
            await self._queue.put(
                ProviderError(ErrorType.PROVIDER_ERROR, f"Provider failure: {exc}")
            )

    async def _next_decisions(self, call: Call) -> list[Decision]:
        """Feed the core the next stream item, or a tick when it falls due first."""
        try:
            item = self._queue.get_nowait()  # an item already waiting is never timed out
        except asyncio.QueueEmpty:
            timeout = max(0.0, call.next_tick_at() - self.clock.monotonic())
            try:
                item = await asyncio.wait_for(self._queue.get(), timeout=timeout)
            except TimeoutError:
                item = _WAKE
        now = self.clock.monotonic()
        decisions = call.tick(now) if item is _WAKE else call.receive(item, now)
        if self.first_text_ms is None and call.first_text_at is not None:
            self.first_text_ms = round((call.first_text_at - self.started) * 1000, 1)
            log_event(log, "attempt.first_text", first_text_ms=self.first_text_ms)
            tracing.event("first text", first_text_ms=self.first_text_ms)
        return decisions

    async def _write(self, chunk: str) -> None:
        """Persist a chunk as one delta event (renewing the lease), then fan it out."""
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
            self.request_stop(attempt_core.CANCEL)

    # --- finalize -----------------------------------------------------------------------

    async def _finalize(self) -> Outcome:
        await self._move(Status.RUNNING, Status.FINALIZING)
        report = self.text
        # Both take most of a second for a report at the size cap: off the event loop.
        with self._timed(Stage.VALIDATE):
            passages = await threads.on_worker_thread(_cited_passages)(self.task_id)
            if passages:
                report, self.removed_citations = await threads.in_blocking_pool(settle_citations)(
                    report, passages
                )
            problems = await threads.in_blocking_pool(validate_report)(
                report, max_kb=settings.REPORTS_MAX_REPORT_KB
            )
        if problems:
            return Outcome(Status.FAILED, ErrorType.VALIDATION_FAILED, " ".join(problems))
        with self._timed(Stage.RENDER):
            html = await threads.in_blocking_pool(rendering.render_markdown)(report)
        result_id = uuid.uuid4()
        with self._timed(Stage.SAVE):
            try:
                sha256, size = await threads.in_blocking_pool(storage.save_result)(
                    result_id, report
                )
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
            await threads.in_blocking_pool(storage.delete_result)(result_id)
            raise
        return Outcome(Status.SUCCEEDED)

    async def _move(self, frm: str, to: str) -> None:
        event = await threads.on_worker_thread(Task.objects.transition)(
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
        if await threads.on_worker_thread(write_end)(self.record(), outcome, **task_fields) is None:
            raise LeaseLost(self.task_id)

    def record(self) -> AttemptRecord:
        """Return what this attempt leaves behind, as it stands now."""
        call = self.call
        return AttemptRecord(
            task_id=self.task_id,
            attempt_id=self.claim.attempt_id,
            number=self.claim.number,
            epoch=self.claim.epoch,
            task_status=self.status,
            text=self.text,
            usage=call.usage if call is not None else Usage(),
            stage_ms=dict(self.stage_ms),
            first_text_ms=self.first_text_ms,
            request_id=call.request_id if call is not None else "",
            provider_called=call is not None,
            answered=call is not None and call.answered,
            prompt_chars=self.prompt_chars,
            removed_citations=self.removed_citations,
            duration_ms=round((self.clock.monotonic() - self.started) * 1000, 1),
        )

    def _timed(self, stage: str):
        return _StageTimer(self, stage)


def _cited_passages(task_id) -> list[SourcePassage]:
    """Return the task's passages, without their text: what settling citations needs."""
    return list(SourcePassage.objects.filter(task_id=task_id).defer("text").order_by("number"))


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
