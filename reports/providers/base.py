"""The one interface every model adapter implements, and the one error type it raises."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from reports.clock import Clock

# Three characters a token is on the safe side: English prose runs about four, code and
# most other languages fewer (reports/providers/fitting.py says how a provider knows better).
CHARS_PER_TOKEN = 3


@dataclass(frozen=True)
class SourceDocument:
    name: str
    text: str
    full_chars: int | None = None  # the length before the text was cut to fit; None: whole
    ocr_pages: tuple[int, ...] = ()  # the (1-based) pages read by OCR, from scanned images


@dataclass(frozen=True)
class GenerationRequest:
    task_id: str
    attempt_number: int
    documents: tuple[SourceDocument, ...]
    instructions: str = ""
    scenario: str = "ok"
    max_output_tokens: int = 4096
    # What the call writes (docs/api.md, "Passages, parts and citations"): the report
    # itself, or a plan's notes on a part, or notes combining earlier notes.
    purpose: str = "report"  # "report" | "notes" | "combine"
    # The passages the call reads, each with its id, for citations: every passage of
    # the task for a one-call report, the part's for notes; empty when the call reads notes.
    passages: tuple = ()
    # Earlier calls' notes that this call reads (a round, or the final report of a plan).
    notes: tuple[str, ...] = ()
    # The documents with pages read by OCR, (file name, pages), for a call that writes the
    # report: its summary says so (wording.read_by_ocr).
    read_by_ocr: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # The beginning of the answer, written for the model, which continues it: a report's
    # skeleton up to the section it is asked for (the `local` provider's small models).
    prefill: str = ""
    # The report's title, for the call that writes a plan's report from notes, which
    # shows neither the documents nor their passages: the skeleton begins with it.
    title: str = ""


@dataclass(frozen=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    source: str = "missing"  # provider | estimate | missing


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class Heartbeat:
    """The provider is connected and alive; says nothing about progress."""

    request_id: str | None = None  # the provider's id for the request, once it is known


@dataclass(frozen=True)
class ReadingProgress:
    """How far the server has read the prompt before writing (llama-server's
    `prompt_progress`): a sign of progress, not of text. Counts are tokens; `cached` of
    them were read before (the server's prompt cache), and `time_ms` is the server's own
    time spent reading the rest so far."""

    processed: int
    total: int
    cached: int = 0
    time_ms: float | None = None

    @property
    def rate(self) -> float | None:
        """Tokens read a second, by the server's own clock; None when it cannot say."""
        read = self.processed - self.cached
        if read <= 0 or not self.time_ms or self.time_ms <= 0:
            return None
        return read / (self.time_ms / 1000)


@dataclass(frozen=True)
class Completed:
    """The provider's completion signal."""

    finish_reason: str  # "stop" is the only one that means a whole report
    usage: Usage = field(default_factory=Usage)
    request_id: str | None = None


StreamItem = TextDelta | Heartbeat | ReadingProgress | Completed


class Retry(enum.Enum):
    RETRYABLE = "retryable"  # may be tried again (after retry_after_s when given)
    PERMANENT = "permanent"  # trying again would fail the same way
    UNKNOWN = "unknown"  # the request may or may not have taken effect


class ProviderError(Exception):
    """A provider failure, saying what kind it is; the runner decides what to do."""

    def __init__(
        self,
        error_type: str,
        message: str,
        *,
        retry: Retry = Retry.PERMANENT,
        retry_after_s: float | None = None,
        status_code: int | None = None,
        request_id: str | None = None,
        plain: bool = False,
    ) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        # The message is Reportline's own words, fit to show a user as it is; otherwise it
        # is the provider's, kept for staff while users read a plain sentence.
        self.plain = plain
        self.retry = retry
        self.retry_after_s = retry_after_s
        self.status_code = status_code
        self.request_id = request_id


class Provider(ABC):
    """A language-model adapter: turns a request into a stream of items.

    The stream yields `TextDelta`s, `Heartbeat`s and (where the server reports how far it
    has read the prompt) `ReadingProgress`, and ends with one `Completed`;
    a stream that ends without `Completed` was truncated. Failures are raised as
    `ProviderError`. Closing the async iterator (cancel) must stop the work.
    """

    name: str = ""
    # Whether its calls teach the provider's figures (reading rate, concurrency limit):
    # a simulation's timings and 429s are made up, and would teach nothing true.
    learns_from_calls: bool = True
    # Whether it plays the submission's `scenario` (misbehaving on purpose); others ignore it.
    plays_scenarios: bool = False
    # Whether its calls run inside the worker's own process: a call of a lost worker died
    # with it, so what it cost is known (the prompt, and the text it had written, if any).
    in_process: bool = False

    def __init__(self, *, clock: Clock | None = None, **options) -> None:
        self.clock = clock or Clock()
        self.options = options

    async def chars_per_token(self, sample: str) -> float:
        """Return how many characters of `sample` this provider's model counts as a
        token, at most: what a plan of calls is cut by (reports/parsers/planning.py)."""
        return CHARS_PER_TOKEN

    async def concurrency(self) -> int | None:
        """Return how many calls the server runs at once, where it says (llama-server's
        slots); None when it does not."""
        return None

    async def serve(self) -> None:
        """Run what the provider needs beside the worker that calls it (a model server of
        its own) until cancelled. The worker supervisor runs it; most providers need none."""
        return

    @abstractmethod
    def stream(self, request: GenerationRequest) -> AsyncIterator[StreamItem]:
        """Return an async iterator over the response."""
