"""One attempt of one task: parse → prepare → generate → validate, render, save.

Generate is one provider call, or a plan of calls (`reports.parsers.planning`) when the whole
input does not fit one: the parts' notes calls side by side, rounds, then the report's
own call from the notes. Every call is one `attempt_core.Call`, run by this same shell.
A notes call's end is saved with its notes and usage (`plan_store.save_call_end`), so an
attempt calls the provider only for the calls no earlier attempt finished.

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
import time
import uuid
from dataclasses import dataclass

from django.conf import settings

from reports import budgets, events, rendering, storage, threads, wakeups, wording
from reports.clock import Clock
from reports.models import ErrorType, Event, Stage, Status, Task
from reports.observability import tracing
from reports.observability.logs import log_event
from reports.parsers import planning
from reports.parsers.base import Extracted, ParseError
from reports.parsers.passages import Passage, cut
from reports.parsers.planning import Plan, Step
from reports.providers import concurrency, reading_rate
from reports.providers.base import (
    CHARS_PER_TOKEN,
    GenerationRequest,
    Provider,
    ProviderError,
    SourceDocument,
    Usage,
)
from reports.providers.prompts import prompt_chars
from reports.streaming import broadcast
from reports.validation import settle_citations, validate_report
from reports.worker import attempt_core, breaker, chunk_writes, plan_store, prepared
from reports.worker.attempt_core import (
    Abandon,
    Call,
    Decision,
    End,
    Limits,
    Reading,
    StreamEnded,
    Write,
)
from reports.worker.attempt_end import AttemptRecord, call_usage, write_end
from reports.worker.call_feed import CallFeed
from reports.worker.leases import Claim, LeaseLost, mark_parsing, mark_sent
from reports.worker.outcome import Outcome
from reports.worker.plan_store import CallEnd, TaskInput
from reports.worker.preparation import DocumentToRead, read_once, until_stopped
from reports.worker.quotes import cite_quotes
from reports.worker.retries import RetryPolicy
from reports.worker.slots import SpareSlots

log = logging.getLogger(__name__)

# The provider's stream gives the loop to the others at least this often, in items.
PUMP_YIELD_EVERY = 32
# The longest an attempt waits for its turn to finish (`_finalize`) before it finishes beside
# the one that holds it: a finish that hangs (a save to an object store that stops
# answering) holds up the others that long, not until it ends.
FINISH_TURN_WAIT_S = 5.0
TOKEN_SAMPLE_CHARS = 100_000
# A reading expected to take this long is announced as the call starts, with its time.
READING_SHOWN_FROM_S = 2.0


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
    def __init__(
        self,
        claim: Claim,
        stored: prepared.Stored | None,
        provider: Provider,
        clock: Clock,
        spare: SpareSlots | None = None,
        finishing: asyncio.Lock | None = None,
    ) -> None:
        self.claim = claim
        self.stored = stored  # what the task held, read with its claim (None: read it again)
        self.spare = spare  # the worker's idle slots, for a plan's calls side by side
        # Held while the attempt finishes: shared by an embedded worker's attempts, which
        # finish one at a time (`Supervisor`); an attempt's own otherwise.
        self.finishing = finishing or asyncio.Lock()
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
            stop_loops=settings.REPORTS_STOP_LOOPS,
        )
        self.status: str = Status.RUNNING  # where the attempt holds its task
        self.stage_ms: dict[str, float] = {}
        self.stop_reason = ""  # attempt_core.CANCEL or LEASE_LOST, once asked to stop
        self._stop_asked = asyncio.Event()  # set with stop_reason: ends a parse under way
        self.call: Call | None = None  # the report's provider call, once its request is sent
        self.prompt_chars = 0
        self.removed_citations = 0  # citation ids naming no passage, taken out of the report
        self.first_text_ms: float | None = None
        # The calls under way, each with the feed its stream goes into.
        self._calls: dict[int, tuple[Call, CallFeed]] = {}
        self._rate_unread = True  # the first call takes the reading rate its claim read
        self.plan: Plan | None = None
        self.documents: list[SourceDocument] = []  # the task's documents, read (parse stage)
        self.passages: list[Passage] = []  # what the documents were cut into (parse stage)
        self._parse_said = ""  # what the parse last said it is reading (OCR)
        self._telling: asyncio.Task | None = None  # writing that as a progress event
        self.notes: dict[str, str] = {}  # a plan's notes so far, by call key
        self.notes_usage: list[Usage] = []  # the usage of the notes calls this attempt made
        self.done = 0  # the plan's calls finished, reused ones included
        self._label = ""  # the plan's latest progress label
        # The plan's calls under way, by call key: the progress label names them all.
        self._under_way: dict[str, Step] = {}
        self._unwritten: list[str] = []  # the report's text handed over, not yet written
        self._writing: asyncio.Task | None = None  # writing it, one write at a time
        self._write_failure: Exception | None = None  # what that write failed with
        self._unsent: list[Event] = []  # committed, not yet fanned out
        self._announcing: asyncio.Task | None = None  # fanning them out
        self._probe_answered = False  # as the circuit's probe, told it the provider answered
        # When a write of this attempt last renewed its lease (time.monotonic(): the lease
        # runs on the database's clock, not the injected one); the heartbeat skips a beat
        # that soon after it.
        self.renewed_at = float("-inf")

    @property
    def task_id(self):
        return self.claim.task_id

    @property
    def text(self) -> str:
        """The attempt's text: the report's, or (before its call) the plan's notes so far,
        marked as notes."""
        if self.call is not None or not self.notes:
            return self.call.text if self.call is not None else ""
        read = [step for step in self.plan.notes_steps if step.key in self.notes]
        return wording.NOTES_SO_FAR + "".join(
            f"\n\n## {step.label}\n\n{self.notes[step.key]}" for step in read
        )

    def request_stop(self, reason: str) -> None:
        """Ask the attempt to stop (cancel or lost lease); it wakes at once."""
        if self.stop_reason:
            return
        self.stop_reason = reason
        self._stop_asked.set()
        for call, _ in self._calls.values():
            call.stop(reason)
        self._wake_calls()

    def _wake_calls(self) -> None:
        for _, feed in self._calls.values():
            feed.wake()

    async def run(self) -> RunResult:
        """Run the attempt to its end; return the status it left its task in."""
        wakeups.subscribe(self.task_id, lambda: self.request_stop(attempt_core.CANCEL))
        try:
            outcome = await self._stages()
            if outcome.status == Status.FINALIZING:
                outcome = await self._finalize()
            if outcome.status == Status.SUCCEEDED:
                return RunResult(outcome.status)
            # What the end wrote: a retry a cancel asked for meanwhile ends the task.
            return RunResult(await self._end(outcome))
        except LeaseLost:
            log_event(log, "attempt.lease_lost", logging.WARNING, status="lease_lost")
            return LOST
        except Exception:
            log.exception("attempt of task %s raised", self.task_id)
            return await self._end_raised()
        finally:
            wakeups.unsubscribe(self.task_id)
            if self._writing is not None:  # a lease lost: its last write ends, fenced
                await asyncio.gather(self._writing, return_exceptions=True)

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
            stored = self.stored or await threads.on_shared_db(prepared.read_stored)(self.claim)
            try:
                read, documents = await until_stopped(
                    self._read_documents(stored.documents), self._stop_asked
                )
            except ParseError as exc:
                return Outcome(Status.FAILED, ErrorType.INVALID_INPUT, str(exc))
            if not read:  # asked to stop while reading: the parse was killed
                if self.stop_reason == attempt_core.LEASE_LOST:
                    raise LeaseLost(self.task_id)
                return Outcome(Status.CANCELLED, "", wording.CANCELLED)
            self.documents = documents
            passages, plan = stored.passages, stored.plan
            if plan is None:
                try:
                    passages, plan = await self._new_plan(passages, stored.task, documents)
                except planning.TooLong as exc:
                    return Outcome(Status.FAILED, ErrorType.INVALID_INPUT, str(exc))
            elif not passages:
                passages = await threads.in_blocking_pool(cut)(documents)
            self.passages = passages
        self.plan = plan
        with self._timed(Stage.PREPARE):
            self.notes = stored.notes
            requests = {
                step.key: plan_store.request_for(
                    stored.task, step, plan, passages, self.notes, tuple(documents)
                )
                for step in plan.steps
                if plan.single or step.kind == planning.PART
            }
            # Each part's prompt is rendered to be counted: off the event loop.
            worst = await threads.in_blocking_pool(self._worst_case)(plan, requests)
            made = {
                "passages": None if stored.passages else passages,
                "plan": None if stored.plan else plan,
            }
            if plan.single:  # the report's call comes next: its prompt's length with the rest
                self.prompt_chars = made["sent_chars"] = prompt_chars(requests[plan.final.key])
            try:
                await threads.on_shared_db(prepared.store_made)(self.claim, worst, **made)
            except budgets.BudgetExhausted as exc:
                return Outcome(Status.FAILED, ErrorType.BUDGET_EXHAUSTED, str(exc))
        with self._timed(Stage.GENERATE):
            if plan.single:
                return await self._call_report(requests[plan.final.key])
            return await self._run_plan(stored.task, plan, passages, requests)

    async def _new_plan(self, passages, task: TaskInput, documents) -> tuple[list, Plan]:
        """Return the task's passages (cut now unless `passages` holds them) and its plan,
        made from what the provider knows of its tokens (both stored with the rest of what
        the attempt made, `prepared.store_made`). Cut and plan are one trip to a thread:
        on a busy machine each trip waits for a core."""
        # A sample is enough to learn the characters a token, and a tokenizer endpoint
        # need not be sent megabytes.
        sample = "\n".join(document.text for document in documents)[:TOKEN_SAMPLE_CHARS]
        counting = planning.Counting(
            context_tokens=settings.REPORTS_CONTEXT_TOKENS,
            max_output_tokens=settings.REPORTS_MAX_OUTPUT_TOKENS,
            chars_per_token=await self.provider.chars_per_token(sample),
            max_calls=settings.REPORTS_MAX_PARTS,
        )
        ocr_pages = plan_store.ocr_pages_of(documents)

        def cut_and_plan() -> tuple[list, Plan]:
            cut_passages = passages or cut(documents)
            return cut_passages, planning.make(cut_passages, task.instructions, counting, ocr_pages)

        return await threads.in_blocking_pool(cut_and_plan)()

    @staticmethod
    def _worst_case(plan: Plan, requests: dict) -> list[tuple[int, int]]:
        """Every call of the plan at its worst: what a part reads, and a call reading notes
        at its whole window."""
        return [
            budgets.worst_case(requests[step.key])
            if step.key in requests
            else budgets.window_worst_case(
                plan.report_tokens if step.kind == planning.FINAL else plan.notes_tokens
            )
            for step in plan.steps
        ]

    async def _read_documents(self, to_read: list[DocumentToRead]) -> list[SourceDocument]:
        """Return the task's documents as text, parsing each file at most once per owner.

        The parse, and the wait for it, happen away from the database threads: they would
        hold up every stream in the process there. Only while a parse runs is the attempt
        marked as parsing: a worker lost meanwhile blames the document.
        """
        parsing = any(document.extracted is None for document in to_read)
        if parsing:
            await self._mark_parsing(True)
        documents = []
        read: dict[str, Extracted] = {}  # a file given twice is parsed once
        try:
            for document in to_read:
                extracted = document.extracted or read.get(document.sha256)
                if extracted is None:
                    extracted = await read_once(document, self._parse_told)
                    read[document.sha256] = extracted
                documents.append(
                    SourceDocument(document.name, extracted.text, ocr_pages=extracted.ocr_pages)
                )
        finally:
            if self._telling is not None:
                # The parse's last word is written before its outcome (a lost lease raises).
                await self._telling
        if parsing:
            await self._mark_parsing(False)
        return documents

    def _parse_told(self, label: str) -> None:
        """Write what a slow parse says it is reading ("Reading page 3 of 50 by OCR") as a
        progress event: the latest word, one write at a time, in order."""
        self._parse_said = label
        if self._telling is None or self._telling.done():
            self._telling = asyncio.ensure_future(self._tell_parse())

    async def _tell_parse(self) -> None:
        written = None
        while self._parse_said != written:
            written = self._parse_said
            # No plan yet: none of its calls done, of none known.
            await self._append(events.progress(0, 0, written))

    async def _mark_parsing(self, parsing: bool) -> None:
        claim = self.claim
        marked = await threads.on_worker_thread(mark_parsing)(
            claim.task_id, claim.attempt_id, claim.epoch, parsing
        )
        if not marked:
            raise LeaseLost(self.task_id)

    # --- generate: provider calls, each run by the core -----------------------------------

    async def _generate(self, request: GenerationRequest) -> Outcome:
        """Make the report's own call after a plan's notes: its text is written as `delta`
        events.

        The prompt's length is kept on the attempt first: were this worker lost, the
        reaper charges an estimate from it and the text that came back. (A single call's
        is kept with what the attempt made, in `_stages`.)"""
        self.prompt_chars = prompt_chars(request)
        claim = self.claim
        sent = await threads.on_worker_thread(mark_sent)(
            claim.task_id, claim.attempt_id, claim.epoch, self.prompt_chars
        )
        if not sent:
            raise LeaseLost(self.task_id)
        return await self._call_report(request)

    async def _call_report(self, request: GenerationRequest) -> Outcome:
        """Make the report's own call, its prompt's length already kept: its text is
        written as `delta` events."""
        return (await self._call(request, report=True))[1]

    async def _call(self, request: GenerationRequest, *, report: bool) -> tuple[Call, Outcome]:
        """Send one request and carry out the core's decisions until it ends the call.

        Only the report's call writes its text as it comes; a notes call's text is kept
        in its `Call` and saved whole at its end.
        """
        rate = None
        if self.provider.learns_from_calls:
            # The attempt's first call reads the rate its claim read; a plan's later calls
            # read what the calls before them taught it.
            if self._rate_unread:
                rate = self.claim.reading_rate
            else:
                rate = await threads.on_shared_db(reading_rate.tokens_per_s)()
            self._rate_unread = False
        call = Call(
            self.limits,
            sent_at=self.clock.monotonic(),
            max_output_tokens=request.max_output_tokens,
            prompt_tokens=prompt_chars(request) // CHARS_PER_TOKEN,
            reading_rate=rate,
        )
        if report:
            self.call = call
        if self.stop_reason:
            call.stop(self.stop_reason)
        feed = CallFeed(call, self.clock)
        self._calls[id(call)] = (call, feed)
        pump = asyncio.create_task(self._pump(request, feed))
        try:
            expected = call.reading_now()
            if report and (expected.eta_s or 0) >= READING_SHOWN_FROM_S:
                await self._reading(expected)  # a long read: the page says how long
            while True:
                for decision in await self._next_decisions(call, feed, report=report):
                    if isinstance(decision, Write):
                        if report:
                            await self._write(decision.text)
                    elif isinstance(decision, Reading):
                        if report:
                            await self._reading(decision)
                    elif isinstance(decision, End):
                        if self.provider.learns_from_calls:
                            await threads.on_worker_thread(_learn_from)(call, decision.outcome)
                        return call, decision.outcome
                    elif isinstance(decision, Abandon):
                        raise LeaseLost(self.task_id)
        finally:
            del self._calls[id(call)]
            feed.close()
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)

    async def _pump(self, request: GenerationRequest, feed: CallFeed) -> None:
        """Read the provider's stream into the call's feed, each item as it comes."""
        try:
            # aclosing: a cancelled pump closes the provider's stream (and its connection)
            # at once, not whenever the generator is collected.
            async with contextlib.aclosing(self.provider.stream(request)) as items:
                given = 0
                async for item in items:
                    feed.give(item)
                    if feed.ended:
                        return
                    given += 1
                    if not given % PUMP_YIELD_EVERY:
                        # A stream already buffered does not hold the loop from the others.
                        await asyncio.sleep(0)
            feed.give(StreamEnded())
        except ProviderError as exc:
            feed.give(exc)
        except Exception as exc:  # an adapter bug must end the call, not hang it
            log.exception("provider %s raised unexpectedly", self.provider.name)
            feed.give(ProviderError(ErrorType.PROVIDER_ERROR, f"Provider failure: {exc}"))

    async def _next_decisions(self, call: Call, feed: CallFeed, *, report: bool) -> list[Decision]:
        """Return what the core decided since the runner last looked, once it decided
        something or the runner must look at the call."""
        decisions = await feed.decisions()
        self._raise_write_failure()
        if self.claim.probe and call.answered and not self._probe_answered:
            self._probe_answered = True  # the provider is back: let the queue go on
            await threads.on_worker_thread(breaker.probe_answered)(
                self.task_id, self.claim.epoch, self.clock
            )
        if report and self.first_text_ms is None and call.first_text_at is not None:
            self.first_text_ms = round((call.first_text_at - self.started) * 1000, 1)
            log_event(log, "attempt.first_text", first_text_ms=self.first_text_ms)
            tracing.event("first text", first_text_ms=self.first_text_ms)
        return decisions

    # --- a plan of calls ------------------------------------------------------------------

    async def _run_plan(
        self, task: TaskInput, plan: Plan, passages, requests: dict[str, GenerationRequest]
    ) -> Outcome:
        """Run the notes calls no earlier attempt finished, level by level (the parts side
        by side, then each round's calls), then the report's call from the notes."""
        self.done = sum(1 for step in plan.notes_steps if step.key in self.notes)
        levels: dict[str, list[Step]] = {}
        for step in plan.notes_steps:
            level = step.key.rsplit("-", 1)[0] if step.kind == planning.ROUND else step.kind
            levels.setdefault(level, []).append(step)
        for steps in levels.values():
            waiting = [step for step in steps if step.key not in self.notes]
            if not waiting:
                continue
            outcome = await self._run_side_by_side(task, plan, passages, requests, waiting)
            if outcome is not None:
                return outcome
        request = plan_store.request_for(
            task, plan.final, plan, passages, self.notes, tuple(self.documents)
        )
        await self._progress(planning.progress_label(plan, plan.final))
        return await self._generate(request)

    async def _run_side_by_side(self, task, plan, passages, requests, steps) -> Outcome | None:
        """Run these notes calls, up to the parallel cap at once; return how the first that
        failed ended the attempt (the others under way finish and keep their notes), or
        None when all of them wrote notes."""
        wanted = min(settings.REPORTS_PLAN_PARALLEL_CALLS, len(steps)) - 1
        if wanted and self.provider.learns_from_calls:
            # No more calls side by side than the provider has seats free for.
            free = await threads.on_shared_db(concurrency.free_seats)()
            wanted = wanted if free is None else min(wanted, free)
        lent = self.spare.borrow(wanted) if self.spare is not None else 0
        try:
            return await self._run_level(task, plan, passages, requests, steps, 1 + lent)
        finally:
            if self.spare is not None:
                self.spare.give_back(lent)

    async def _run_level(self, task, plan, passages, requests, steps, width: int):
        parallel = asyncio.Semaphore(width)
        failures: list[Outcome] = []

        async def run(step: Step) -> None:
            async with parallel:
                if failures or self.stop_reason:
                    return
                request = requests.get(step.key) or plan_store.request_for(
                    task, step, plan, passages, self.notes
                )
                try:
                    failure = await self._notes_call(plan, step, request)
                except LeaseLost:
                    self.request_stop(attempt_core.LEASE_LOST)  # the others stop writing too
                    raise
                if failure is not None:
                    failures.append(failure)

        results = await asyncio.gather(*(run(step) for step in steps), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if failures:
            return failures[0]
        if self.stop_reason:  # asked to stop between calls
            return Outcome(Status.CANCELLED, "", wording.CANCELLED)
        return None

    async def _notes_call(self, plan: Plan, step: Step, request: GenerationRequest):
        """Make one notes call and save its end; return its outcome when it failed."""
        self._under_way[step.key] = step
        try:
            await self._progress(self._being_read())
            await threads.on_worker_thread(plan_store.mark_started)(self.task_id, step.key)
            started = self.clock.monotonic()
            call, outcome = await self._call(request, report=False)
        finally:
            del self._under_way[step.key]
        succeeded = outcome.status == Status.FINALIZING or _notes_kept(call, outcome)
        usage = call_usage(
            call.usage,
            answered=call.answered,
            unknown=outcome.status == Status.RECONCILIATION_REQUIRED,
            prompt_chars=prompt_chars(request),
            text=call.text,
            output_cap=request.max_output_tokens,
        )
        self.notes_usage.append(usage)
        end = CallEnd(
            key=step.key,
            succeeded=succeeded,
            notes=call.text.strip(),
            error_type=outcome.error_type,
            usage=usage,
            cost_micros=budgets.call_cost_of(
                self.task_id, self.claim.model, usage, answered=call.answered
            ),
            duration_ms=round((self.clock.monotonic() - started) * 1000, 1),
            first_text_ms=(
                round((call.first_text_at - started) * 1000, 1)
                if call.first_text_at is not None
                else None
            ),
        )
        saved = await threads.on_worker_thread(plan_store.save_call_end)(
            self.task_id, self.claim.epoch, self.claim.number, end
        )
        if not saved:
            raise LeaseLost(self.task_id)
        if not succeeded:
            return outcome
        self.notes[step.key] = end.notes
        self.done += 1
        await self._progress(self._being_read())
        return None

    def _being_read(self) -> str:
        """The label of every call of the plan under way, as one starts or ends. Calls run
        side by side start and end in any order, and the page says what is being read, all
        of it, and never what was."""
        return planning.progress_label(self.plan, *self._under_way.values())

    async def _progress(self, label: str) -> None:
        """Persist and fan out how far the plan has come."""
        self._label = label
        await self._append(events.progress(self.done, self.plan.total, label))

    async def _reading(self, reading: Reading) -> None:
        """Persist and fan out how far the model has read the report's prompt."""
        # A plan's own label stays (what the call reads); a single call's says "reading".
        label = self._label or wording.READING
        await self._append(
            events.progress(
                self.done,
                self.plan.total,
                label,
                tokens_read=reading.tokens_read,
                tokens_total=reading.tokens_total,
                eta_s=reading.eta_s,
            )
        )

    async def _write(self, chunk: str) -> None:
        """Hand a chunk of the report over to be written as a delta event, and go back to
        the provider's stream without waiting for it.

        One write at a time per attempt keeps the events in order. What is handed over
        while one is under way goes into the next, whole: when the database is slow, a
        runner that waited for each write read one delta after it and wrote that alone, and
        fell further behind with every write (benchmark 2). A write that fails is raised at
        the runner's next step; a lost lease also stops the call at once."""
        self._raise_write_failure()
        self._unwritten.append(chunk)
        if self._writing is None or self._writing.done():
            self._writing = asyncio.create_task(self._write_unwritten())

    async def _write_unwritten(self) -> None:
        while self._unwritten and self._write_failure is None:
            chunk, self._unwritten = "".join(self._unwritten), []
            try:
                await self._append_now(events.delta(chunk), first_text=True)
            except Exception as exc:
                self._write_failure, self._unwritten = exc, []
                if isinstance(exc, LeaseLost):
                    self.request_stop(attempt_core.LEASE_LOST)
                else:
                    self._wake_calls()

    def _raise_write_failure(self) -> None:
        """Raise what a write handed over failed with, once."""
        failure, self._write_failure = self._write_failure, None
        if failure is not None:
            raise failure

    async def _written(self) -> None:
        """Wait until the text handed over so far is written: before any other event of
        the attempt, and its end."""
        if self._writing is not None:
            await asyncio.gather(self._writing, return_exceptions=True)
        self._raise_write_failure()

    async def _append(self, draft: events.Draft) -> None:
        """Append an event after the text handed over before it (`_append_now`)."""
        await self._written()
        await self._append_now(draft)

    async def _append_now(self, draft: events.Draft, *, first_text: bool = False) -> None:
        """Append an event fenced by the lease (renewing it), fan it out, and stop when the
        same write found a cancel requested."""
        written = await chunk_writes.append_event(
            self.task_id, self.claim.epoch, draft, first_text=first_text
        )
        if written is None:
            raise LeaseLost(self.task_id)
        self.renewed_at = time.monotonic()
        event, cancel_requested = written
        self._announce(event)
        if cancel_requested:
            self.request_stop(attempt_core.CANCEL)

    # --- finalize -----------------------------------------------------------------------

    async def _finalize(self) -> Outcome:
        await self._move(Status.RUNNING, Status.FINALIZING)
        asked = self.clock.monotonic()
        in_turn = await _turn(self.finishing)  # after the other attempts that ended before
        try:
            return await self._finish(waited_ms=round((self.clock.monotonic() - asked) * 1000, 1))
        finally:
            if in_turn:
                self.finishing.release()

    async def _finish(self, *, waited_ms: float) -> Outcome:
        """Check, render and save the report, and write the attempt's end."""
        report = self.text
        # Each takes up to most of a second for a report at the size cap: off the event loop.
        with self._timed(Stage.VALIDATE) as validate:
            validate.fields["waited_ms"] = waited_ms  # for the attempts finishing before
            if settings.REPORTS_CITE_QUOTES:
                report, validate.fields["quotes_cited"] = await threads.in_blocking_pool(
                    cite_quotes
                )(report, self.passages)
            report, self.removed_citations = await threads.in_blocking_pool(settle_citations)(
                report, self.passages
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
        await self._written()
        event = await threads.on_worker_thread(Task.objects.transition)(
            self.task_id, frm, to, expect_epoch=self.claim.epoch
        )
        if event is None:
            raise LeaseLost(self.task_id)
        self.status = to
        self._announce(event)

    def _announce(self, event: Event) -> None:
        """Fan a committed event out without holding up the stream, after those before it.

        The runner goes back to the provider's text without waiting for a fan-out: with
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

    async def _end(self, outcome: Outcome, **task_fields) -> str:
        """Write the attempt's end and the task's new status in one transaction; return
        that status."""
        await self._written()
        await self._announced()
        ended = await threads.on_worker_thread(write_end)(
            self.record(), outcome, clock=self.clock, **task_fields
        )
        if ended is None:
            raise LeaseLost(self.task_id)
        return ended.status

    def record(self) -> AttemptRecord:
        """Return what this attempt leaves behind, as it stands now."""
        call = self.call
        return AttemptRecord(
            task_id=self.task_id,
            attempt_id=self.claim.attempt_id,
            number=self.claim.number,
            epoch=self.claim.epoch,
            model=self.claim.model,
            task_status=self.status,
            text=self.text,
            usage=call.usage if call is not None else Usage(),
            stage_ms=dict(self.stage_ms),
            first_text_ms=self.first_text_ms,
            request_id=call.request_id if call is not None else "",
            provider_called=call is not None or bool(self.notes_usage),
            answered=call is not None and call.answered,
            prompt_chars=self.prompt_chars,
            removed_citations=self.removed_citations,
            duration_ms=round((self.clock.monotonic() - self.started) * 1000, 1),
            notes_usage=tuple(self.notes_usage),
            output_cap=call.max_output_tokens if call is not None else None,
        )

    def _timed(self, stage: str):
        return _StageTimer(self, stage)


def _learn_from(call: Call, outcome: Outcome) -> None:
    """Teach the provider's figures what a call showed: its reading rate, and whether the
    server was crowded (reports.providers.concurrency)."""
    taken = call.reading_taken()
    if taken is not None:
        reading_rate.learn(*taken)
    overloaded = outcome.error_type == ErrorType.RATE_LIMITED
    if call.answered or overloaded:
        concurrency.after_call(overloaded=overloaded, server_wait_s=call.server_wait_s())


class _StageTimer:
    def __init__(self, run: AttemptRun, stage: str) -> None:
        self.run, self.stage = run, stage
        self.span = tracing.stage(stage)
        self.fields: dict[str, object] = {}  # what the stage counted, for its line

    def __enter__(self) -> _StageTimer:
        self.span.__enter__()
        self.start = self.run.clock.monotonic()
        return self

    def __exit__(self, *exc) -> None:
        elapsed = round((self.run.clock.monotonic() - self.start) * 1000, 1)
        self.run.stage_ms[self.stage] = elapsed
        log_event(
            log,
            "stage.ended",
            stage=self.stage,
            status="raised" if exc[0] else "ok",
            duration_ms=elapsed,
            **self.fields,
        )
        self.span.__exit__(*exc)


def _notes_kept(call: Call, outcome: Outcome) -> bool:
    """Tell whether a notes call that did not end well still wrote notes on its part: it
    was stopped at its output cap or for looping, with text before. A small model seldom
    stops on its own; the report's call reads what it wrote, and is checked as ever."""
    stopped = call.capped or outcome.error_type == ErrorType.DEGENERATE_OUTPUT
    return stopped and bool(call.text.strip())


async def _turn(finishing: asyncio.Lock) -> bool:
    """Take `finishing` within FINISH_TURN_WAIT_S; False when it stayed held that long."""
    try:
        async with asyncio.timeout(FINISH_TURN_WAIT_S):
            await finishing.acquire()
    except TimeoutError:
        return False
    return True
