"""The rules of one provider call, without I/O: what to write when, and how the call ends.

A state machine in the manner of h11. Its shell (`reports.worker.pipeline`) feeds it what
the provider streamed (`receive`), the time when nothing came (`tick`) and stop requests
(`stop`); it answers with decisions — `Write` this chunk now, `End` the call with this
outcome, `Abandon` it (the lease is gone: write nothing more) — and says when it next
needs a tick (`next_tick_at`). It never reads a clock, sleeps, logs or touches the
database: every instant is handed to it, so a test drives it with plain numbers.

It owns coalescing, the silence clocks (no answer after the request was sent, no text
after an answer; both count only once the server's reading of the prompt should be over,
by what it reports or the rate learned), what the page is told while the model reads, the
task's deadline, what a completion, an empty answer or a truncated
stream means, and asks the retry table (`reports.worker.retries`) about a provider's
error. One `Call` is one provider call: an attempt of one call runs one; a plan of calls
runs one per call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from reports import wording
from reports.providers.base import (
    CHARS_PER_TOKEN,
    Completed,
    Heartbeat,
    ProviderError,
    ReadingProgress,
    TextDelta,
    Usage,
)
from reports.states import ErrorType, Status
from reports.worker.loops import LoopCheck
from reports.worker.outcome import Outcome
from reports.worker.retries import RetryPolicy

FLUSH_INTERVAL_S = 0.1  # coalesce provider deltas into one event about this often…
FLUSH_CHARS = 400  # …or once this many characters are waiting
FIRST_TEXT_UNCOALESCED_S = 0.15  # except for the first text's first moments (benchmark 1)

# The reading of the prompt may take this many times what the learned rate says before
# silence counts against it: a server under load reads slower than it did alone.
READING_MARGIN = 2.0
READING_SHOWN_EVERY_S = 1.0  # how often the page is told how far the reading has come

CANCEL = "cancel"  # the user asked the task to stop
LEASE_LOST = "lease_lost"  # another worker may hold the task now

# The core also guards the output: its cap, and a stream that loops (reports.worker.loops).
# A call's output is cut once its text is longer than the output cap could hold: while it
# streams, a provider counts nothing, so the cap is counted in characters, at twice the three
# characters a token that usage is estimated at (CHARS_PER_TOKEN). Prose runs three to five
# (SmolLM2's reports: 3.9 to 4.8), so a provider that keeps to `max_tokens` stops first; one
# that ignores it is cut here, with a little room besides for a small cap's long tokens (eight
# tokens can be fifty characters). A charge is never for more than the cap
# (attempt_end.call_usage).
CAP_CHARS_PER_TOKEN = 2 * CHARS_PER_TOKEN
CAP_SLACK_CHARS = 200


def cap_chars(max_output_tokens: int) -> int:
    """Return the characters a call capped at `max_output_tokens` may write."""
    return max_output_tokens * CAP_CHARS_PER_TOKEN + CAP_SLACK_CHARS


# PostgreSQL refuses NUL in text and JSON, and no database stores a lone surrogate (a broken
# server can send one as a JSON escape): the model's output drops NUL and shows U+FFFD.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class StreamEnded:
    """The provider's stream ended; without a `Completed` before it, it was truncated."""


@dataclass(frozen=True)
class Limits:
    """What bounds a call: instants on the shell's clock, spans in seconds."""

    deadline: float  # the task's deadline: submit + REPORTS_TASK_DEADLINE_S
    response_timeout_s: float  # no answer at all by then: the outcome is unknown
    stall_timeout_s: float  # no text for this long after an answer: stalled
    attempt: int  # this attempt's number, for the retry table
    retries: RetryPolicy
    stop_loops: bool = True  # end a stream that keeps repeating itself: degenerate_output


@dataclass(frozen=True)
class Write:
    """Persist this chunk as one `delta` event now, then fan it out."""

    text: str


@dataclass(frozen=True)
class End:
    """Stop the call: it ends with `outcome`. `finalizing`: its text is whole; `queued`:
    retry after `outcome.retry_after_s`; any other status ends the task."""

    outcome: Outcome


@dataclass(frozen=True)
class Reading:
    """Tell the page how far the model has read the prompt: `tokens_read` of
    `tokens_total` (None: the server does not say), about `eta_s` more seconds (None:
    not known)."""

    tokens_read: int | None
    tokens_total: int | None
    eta_s: float | None


@dataclass(frozen=True)
class Abandon:
    """Stop the call and write nothing more: the lease is gone."""


type Decision = Write | Reading | End | Abandon
type StreamItem = TextDelta | Heartbeat | ReadingProgress | Completed | ProviderError | StreamEnded


def past_deadline_at_start(limits: Limits, now: float) -> Outcome | None:
    """How an attempt ends when its task waited in the queue past its deadline."""
    if now >= limits.deadline:
        return Outcome(
            Status.FAILED, ErrorType.TIMEOUT, "The task waited in the queue past its deadline."
        )
    return None


@dataclass
class Call:
    """One provider call, from the moment its request was sent (`sent_at`)."""

    limits: Limits
    sent_at: float
    max_output_tokens: int | None = None  # the output cap the request asked for
    # The prompt's size in tokens as the shell estimates it, and the rate at which the
    # provider reads (tokens a second, learned from earlier calls; None: not yet known).
    prompt_tokens: int = 0
    reading_rate: float | None = None
    answered: bool = False  # the provider answered: text or a heartbeat
    first_text_at: float | None = None
    usage: Usage = field(default_factory=Usage)
    # The call ended at its output cap: the provider stopped there, or it was stopped.
    capped: bool = False
    request_id: str = ""
    stop_reason: str = ""  # CANCEL or LEASE_LOST, once asked to stop
    outcome: Outcome | None = None  # once it ended
    reading: ReadingProgress | None = None  # the server's latest word on its reading
    _chunks: list[str] = field(default_factory=list, init=False)  # every text taken in, in order
    _pending: list[str] = field(default_factory=list, init=False)  # taken in, not yet written
    _pending_chars: int = field(default=0, init=False)
    _chars: int = field(default=0, init=False)  # the length of `text`
    _loops: LoopCheck = field(default_factory=LoopCheck, init=False)
    _pending_since: float = field(default=0.0, init=False)
    _last_text_at: float = field(init=False)
    _read_at: float = field(init=False)  # when the reading last moved on
    _first_read: tuple[float, float] | None = field(default=None, init=False)
    # The first reading the server said was whole, with its time: the one to learn the rate
    # from. A report written in sections (the `local` provider's skeleton) is several calls
    # in one stream, and each later one reads only the few tokens its cache lacks.
    _whole_read: ReadingProgress | None = field(default=None, init=False)
    _reading_shown_at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._last_text_at = self._read_at = self.sent_at

    @property
    def text(self) -> str:
        """Every text the call received, written or not."""
        return "".join(self._chunks)

    # --- what the shell feeds in -------------------------------------------------------

    def receive(self, item: StreamItem, now: float) -> list[Decision]:
        """Take one stream item in, received at `now`."""
        if self.stop_reason:
            if isinstance(item, TextDelta):
                self._take(item, now)  # text that arrived before the stop is kept
            return self._stopped(now)
        overdue = self._overdue(now)
        if overdue is not None:
            return self._end(overdue, now)
        ended = self._take(item, now)
        if ended is not None:
            return self._end(ended, now)
        if isinstance(item, ReadingProgress):
            return self._reading_shown(now)
        return self._coalesced(now)

    def tick(self, now: float) -> list[Decision]:
        """Say that `now` has come with nothing received (or that a stop was asked for)."""
        if self.stop_reason:
            return self._stopped(now)
        overdue = self._overdue(now)
        if overdue is not None:
            return self._end(overdue, now)
        return self._coalesced(now)

    def stop(self, reason: str) -> None:
        """Ask the call to stop (CANCEL or LEASE_LOST); the next `tick` or item ends it.
        The first reason given stands."""
        self.stop_reason = self.stop_reason or reason

    # Each limit is an instant, computed one way and compared with `>=` both where the shell
    # waits for it and where it is checked: `now - start >= limit` can be false at the very
    # instant `start + limit` (floating point), and the wait would then spin at zero.
    def next_tick_at(self) -> float:
        """Return the instant at which a time limit or a write falls due."""
        due = min(self.limits.deadline, self._silence_due())
        return min(due, self._flush_due()) if self._writable() else due

    # --- the rules ----------------------------------------------------------------------

    def _take(self, item: StreamItem, now: float) -> Outcome | None:
        """Take one item in; return how the call ends when the stream did."""
        if isinstance(item, TextDelta):
            self.answered = True
            text = _UNSTORABLE.sub(lambda m: "" if m[0] == "\x00" else "\ufffd", item.text)
            text, past_cap = self._within_cap(text)
            if text:
                self._last_text_at = now
                if self.first_text_at is None:
                    self.first_text_at = now
                if not self._pending:
                    self._pending_since = now
                self._pending.append(text)
                self._pending_chars += len(text)
                self._chars += len(text)
                self._chunks.append(text)
            return past_cap
        elif isinstance(item, Heartbeat):
            self.answered = True
            self.request_id = item.request_id or self.request_id
        elif isinstance(item, ReadingProgress):
            self.answered = True
            if self.first_text_at is None:
                before = self.reading.processed if self.reading is not None else -1
                if item.processed > before:
                    self._read_at = now  # reading is progress: the silence starts again
                if self._first_read is None and item.time_ms is not None:
                    self._first_read = (now, item.time_ms)
            if self._whole_read is None and item.time_ms and item.processed >= item.total:
                self._whole_read = item
            self.reading = item
        elif isinstance(item, Completed):
            self.usage = item.usage
            self.request_id = item.request_id or self.request_id
            return self._completed(item)
        elif isinstance(item, StreamEnded):
            return Outcome(
                Status.FAILED,
                ErrorType.STREAM_TRUNCATED,
                "The stream ended before the report was complete.",
            )
        elif isinstance(item, ProviderError):
            self.request_id = item.request_id or self.request_id
            return self.limits.retries.after_provider_error(
                item,
                attempt=self.limits.attempt,
                text_arrived=bool(self._chunks),
                now=now,
                deadline=self.limits.deadline,
            )
        return None

    def _within_cap(self, text: str) -> tuple[str, Outcome | None]:
        """Return what of `text` the output cap holds, and how the call ends when the
        text went past it (CAP_CHARS_PER_TOKEN)."""
        if self.max_output_tokens is None:
            return text, None
        room = cap_chars(self.max_output_tokens) - self._chars
        if len(text) <= room:
            return text, None
        self.capped = True
        return text[: max(0, room)], Outcome(
            Status.FAILED,
            ErrorType.STREAM_TRUNCATED,
            f"The provider kept writing past the output cap of {self.max_output_tokens:,} "
            "tokens, so the call was stopped.",
        )

    def _looping(self, chunk: str) -> Outcome | None:
        """Return how the call ends when the stream has fallen into a loop, checked as each
        chunk is written: the check sees the same tokens however the text is cut, and a
        check of every delta was a quarter of the runner's work on each."""
        if not self.limits.stop_loops or not self._loops.feed(chunk):
            return None
        return Outcome(
            Status.FAILED,
            ErrorType.DEGENERATE_OUTPUT,
            f"The model kept repeating itself, so the call was stopped after "
            f"{self._chars:,} characters; the text it wrote is kept.",
        )

    def _completed(self, done: Completed) -> Outcome:
        self.capped = done.finish_reason == "length"
        if done.finish_reason != "stop":
            return Outcome(
                Status.FAILED, ErrorType.STREAM_TRUNCATED, wording.stopped_early(done.finish_reason)
            )
        # Only the provider's own count proves it wrote past the cap; an estimate does not.
        written = done.usage.output_tokens if done.usage.source == "provider" else None
        if self.max_output_tokens is not None and (written or 0) > self.max_output_tokens:
            return Outcome(
                Status.FAILED,
                ErrorType.STREAM_TRUNCATED,
                f"The provider wrote {written:,} tokens, past the output cap of "
                f"{self.max_output_tokens:,}.",
            )
        if not self.text.strip():
            return Outcome(Status.FAILED, ErrorType.EMPTY_OUTPUT, "The provider returned no text.")
        return Outcome(Status.FINALIZING)

    def _silence_due(self) -> float:
        """When the provider's silence ends the call: no answer, or no text (a stall).
        Before the first text, silence counts only once the reading should be over."""
        if self.first_text_at is not None:
            return self._last_text_at + self.limits.stall_timeout_s
        quiet_from = max(self._read_at, self._reading_over_at())
        if self.answered:
            return quiet_from + self.limits.stall_timeout_s
        return quiet_from + self.limits.response_timeout_s

    # --- reading the prompt ---------------------------------------------------------------

    def _rate(self) -> float | None:
        """Tokens read a second: as the server measures this call, else as learned."""
        measured = self.reading.rate if self.reading is not None else None
        return measured or self.reading_rate

    def _reading_left(self) -> tuple[int, int] | None:
        """(tokens read, tokens to read) by the server's word, else the estimate; None
        when neither is known."""
        if self.reading is not None:
            return self.reading.processed, self.reading.total
        if self.prompt_tokens:
            return 0, self.prompt_tokens
        return None

    def _reading_over_at(self) -> float:
        """When the reading should be over, with a margin: from its latest progress at
        the rate it showed, else from the request at the learned rate."""
        left, rate = self._reading_left(), self._rate()
        if left is None or not rate:
            return self._read_at
        read, total = left
        return self._read_at + max(0, total - read) / rate * READING_MARGIN

    def reading_now(self) -> Reading:
        """What the page is told of the reading: as far as the server said, or only the
        size and the time expected."""
        left, rate = self._reading_left(), self._rate()
        if left is None:
            return Reading(None, None, None)
        read, total = left
        eta = max(0.0, (total - read) / rate) if rate else None
        return Reading(read if self.reading is not None else None, total, eta)

    def _reading_shown(self, now: float) -> list[Decision]:
        """Tell the page how far the reading has come: at most every
        READING_SHOWN_EVERY_S, and once it is whole."""
        if self.first_text_at is not None or self.reading is None:
            return self._coalesced(now)
        whole = self.reading.processed >= self.reading.total
        shown = self._reading_shown_at
        if not whole and shown is not None and now - shown < READING_SHOWN_EVERY_S:
            return []
        self._reading_shown_at = now
        return [self.reading_now()]

    def server_wait_s(self) -> float | None:
        """How long the request waited inside the server before it began reading (a
        server with no free slot queues it): by the server's own timing where it gave
        one, else the first text's wait beyond what reading should take."""
        if self._first_read is not None:
            at, time_ms = self._first_read
            return max(0.0, at - self.sent_at - time_ms / 1000)
        if self.first_text_at is not None and self.reading_rate and self.prompt_tokens:
            reading_s = self.prompt_tokens / self.reading_rate
            return max(0.0, self.first_text_at - self.sent_at - reading_s)
        return None

    def reading_taken(self) -> tuple[int, float] | None:
        """(tokens, seconds) the server took to read this call's prompt, to learn the
        rate from: its own timing, else the usage and the first text's wait."""
        reading = self._whole_read or self.reading
        if reading is not None and reading.time_ms:
            return reading.processed - reading.cached, reading.time_ms / 1000
        tokens = self.usage.input_tokens
        if self.first_text_at is not None and tokens:
            return tokens - (self.usage.cached_tokens or 0), self.first_text_at - self.sent_at
        return None

    def _overdue(self, now: float) -> Outcome | None:
        """Return how the call ends when a time limit has passed (heartbeats don't count)."""
        if now >= self.limits.deadline:
            return Outcome(Status.FAILED, ErrorType.TIMEOUT, "The task ran past its deadline.")
        if now < self._silence_due():
            return None
        if not self.answered:
            return Outcome(
                Status.RECONCILIATION_REQUIRED,
                "",
                "The provider did not answer; whether it ran the request is unknown.",
            )
        return Outcome(
            Status.FAILED,
            ErrorType.STALLED,
            f"No text arrived for {self.limits.stall_timeout_s:g} s.",
        )

    def _stopped(self, now: float) -> list[Decision]:
        if self.stop_reason == LEASE_LOST:
            return [Abandon()]
        return self._end(Outcome(Status.CANCELLED, "", wording.CANCELLED), now)

    def _end(self, outcome: Outcome, now: float) -> list[Decision]:
        """End the call: what is waiting is written first, whole. A stream that fell into a
        loop in that last chunk ends degenerate, as it would have a chunk earlier, unless
        it was cancelled or cut at its cap."""
        written = self._flush(now, final=True)
        if written and outcome.status != Status.CANCELLED and not self.capped:
            outcome = self._looping(written[0].text) or outcome
        self.outcome = outcome
        return [*written, End(outcome)]

    # --- coalescing ---------------------------------------------------------------------

    def _flush_due(self) -> float:
        return self._pending_since + FLUSH_INTERVAL_S

    def _coalesced(self, now: float) -> list[Decision]:
        """Write what is waiting when it is due: the first text delta by delta (it is what
        users wait for), then about every FLUSH_INTERVAL_S or FLUSH_CHARS."""
        if not self._writable():
            return []
        if (
            now - self.first_text_at < FIRST_TEXT_UNCOALESCED_S
            or now >= self._flush_due()
            or self._pending_chars >= FLUSH_CHARS
        ):
            written = self._flush(now, final=False)
            looping = self._looping(written[0].text) if written else None
            return written if looping is None else [*written, *self._end(looping, now)]
        return []

    def _writable(self) -> bool:
        """Whether some of what is waiting may be written now (`_split`): anything but a
        lone backslash."""
        return self._pending_chars > 1 or (self._pending_chars == 1 and self._pending[0] != "\\")

    def _split(self) -> tuple[str, str]:
        """Split what is waiting into what may be written now and what must wait.

        A chunk never ends in an odd run of backslashes while the stream goes on: the
        last one may escape the next text, and each delta is unescaped on its own.
        """
        chunk = "".join(self._pending)
        backslashes = len(chunk) - len(chunk.rstrip("\\"))
        return (chunk[:-1], chunk[-1]) if backslashes % 2 else (chunk, "")

    def _flush(self, now: float, *, final: bool) -> list[Decision]:
        chunk, held = ("".join(self._pending), "") if final else self._split()
        self._pending = [held] if held else []
        self._pending_chars = len(held)
        self._pending_since = now
        return [Write(chunk)] if chunk else []
