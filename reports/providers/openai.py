"""The `openai` provider: any OpenAI-compatible server, streamed through the official SDK.

The SDK's own retries are off: the task runner owns the one retry policy (the retry
table of docs/providers.md), and this adapter only says what kind of failure each one
is. The runner's clocks own the time limits too: the read timeout given to the HTTP
client is the longer of `REPORTS_PROVIDER_RESPONSE_TIMEOUT_S` and
`REPORTS_STALL_TIMEOUT_S`, a backstop that fires only when the runner's own limits did
not.
"""

from __future__ import annotations

import contextlib
import email.utils
import math
import ssl
import time
from collections.abc import AsyncIterator

import httpx2
import openai
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from reports.clock import Clock
from reports.models import ErrorType
from reports.providers import fitting
from reports.providers.base import (
    CHARS_PER_TOKEN,
    Completed,
    GenerationRequest,
    Heartbeat,
    Provider,
    ProviderError,
    ReadingProgress,
    Retry,
    StreamItem,
    TextDelta,
    Usage,
)
from reports.providers.prompts import build_messages

# Sent when OPENAI_API_KEY is empty: local servers (Ollama, vLLM, llama.cpp) ignore it,
# and the SDK will not send a request without one.
NO_KEY = "no-key"
OVERLOADED = frozenset({503, 529})
# The error codes an OpenAI-compatible server sends with a 429 when the account's spend
# cap or quota is used up: waiting does not help.
SPEND_CAP_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
DETAIL_CHARS = 300
# Timeouts that mean the request never left: safe to try again.
NOT_SENT = (httpx2.ConnectTimeout, httpx2.PoolTimeout)
# What a server understands beyond OpenAI's own API (REPORTS_PROVIDER_DIALECT). Only
# llama.cpp's llama-server is asked for its prompt progress (`return_progress`) and its
# slots (`/props`): a field another server does not know may be refused.
DIALECTS = frozenset({"openai", "llama-server"})
PROPS_TIMEOUT_S = 5.0


class OpenAIProvider(Provider):
    name = "openai"

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        base_url: str = "",
        api_key: str = "",
        model: str = "",
        connect_timeout_s: float = 10.0,
        read_timeout_s: float | None = None,
        dialect: str = "openai",
        **options,
    ) -> None:
        # The key is kept out of `options`, which may be shown; only this client holds it.
        super().__init__(clock=clock, base_url=base_url, model=model, dialect=dialect, **options)
        if dialect not in DIALECTS:
            raise ImproperlyConfigured(
                f"REPORTS_PROVIDER_DIALECT must be one of {', '.join(sorted(DIALECTS))}, "
                f"not {dialect!r}."
            )
        self.dialect = dialect
        self.model = model or settings.REPORTS_MODEL
        if not self.model:
            raise ImproperlyConfigured(
                "REPORTS_MODEL must name the model when REPORTS_PROVIDER is 'openai' "
                "(for example gpt-4.1-mini, or llama3.2 on Ollama)."
            )
        if not base_url:
            raise ImproperlyConfigured("OPENAI_BASE_URL must be the server's /v1 URL.")
        self.base_url = base_url
        self._api_key = api_key
        if read_timeout_s is None:
            read_timeout_s = max(
                settings.REPORTS_PROVIDER_RESPONSE_TIMEOUT_S, settings.REPORTS_STALL_TIMEOUT_S
            )
        self.timeout = httpx2.Timeout(
            read_timeout_s, connect=connect_timeout_s, pool=connect_timeout_s
        )
        # Built once: a TLS context takes tens of milliseconds to load, a client a fraction.
        self._tls = ssl.create_default_context()
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.fitter = fitting.ContextFitter(self.root, self.model)

    def http(self) -> httpx2.AsyncClient:
        """Return a new HTTP client: each request has connections of its own, so none
        inherits one a failed request left behind."""
        return openai.DefaultAsyncHttpxClient(verify=self._tls, timeout=self.timeout)

    def client(self, http: httpx2.AsyncClient) -> openai.AsyncOpenAI:
        """Return a new SDK client over `http`, retries off; closing it closes `http`."""
        return openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self._api_key or NO_KEY,
            max_retries=0,
            timeout=self.timeout,
            http_client=http,
        )

    def extra_body(self, request: GenerationRequest) -> dict:
        """Return the fields this server takes beyond OpenAI's own: llama-server's prompt
        progress in its dialect; none for any other server."""
        return {"return_progress": True} if self.dialect == "llama-server" else {}

    async def chars_per_token(self, sample: str) -> float:
        """The server's own count of `sample` where it offers one, else what usage taught
        (`fitting.ContextFitter`), else CHARS_PER_TOKEN; never more than CHARS_PER_TOKEN."""
        async with self.http() as http:
            tokens = await self.fitter.count(http, sample) if sample else None
        if tokens:
            return min(CHARS_PER_TOKEN, len(sample) / tokens * fitting.SAFETY)
        return self.fitter.chars_per_token or CHARS_PER_TOKEN

    async def concurrency(self) -> int | None:
        """llama-server's `total_slots` from its `/props`; None for any other server, or
        when it does not answer."""
        if self.dialect != "llama-server":
            return None
        try:
            async with self.http() as http:
                response = await http.get(f"{self.root}/props", timeout=PROPS_TIMEOUT_S)
                slots = response.json().get("total_slots") if response.is_success else None
        except (httpx2.HTTPError, ValueError, AttributeError):
            return None
        return slots if isinstance(slots, int) and slots > 0 else None

    async def stream(self, request: GenerationRequest) -> AsyncIterator[StreamItem]:
        configured = settings.REPORTS_CONTEXT_TOKENS
        # A request of passages or notes was cut to fit by the plan of calls
        # (reports/parsers/planning.py): it is never cut here, and an overflow is a clear error.
        planned = bool(request.passages or request.notes)
        sent = request
        if not planned:
            async with self.http() as http:
                sent = await self.fitter.fit(http, request, configured)
        try:
            async with contextlib.aclosing(self._stream_once(sent)) as items:
                async for item in items:
                    yield item
            return
        except _Overflowed as overflowed:
            if planned:
                raise self._too_long(overflowed, sent, configured) from None
            # Once, with the input cut to what the server said fits; the cut note in the
            # prompt tells the model, and so the report, what was left out.
            sent = self._cut_to(overflowed, sent, configured)
        try:
            async with contextlib.aclosing(self._stream_once(sent)) as items:
                async for item in items:
                    yield item
        except _Overflowed as overflowed:
            raise self._too_long(overflowed, sent, configured) from None

    async def _stream_once(self, request: GenerationRequest) -> AsyncIterator[StreamItem]:
        # aclosing, here and above: a cancel closes the response, and so the connection,
        # at once, not whenever the generators are collected.
        async with (
            self.client(self.http()) as client,
            contextlib.aclosing(self._request(client, request)) as items,
        ):
            async for item in items:
                yield item

    async def _request(
        self, client: openai.AsyncOpenAI, request: GenerationRequest
    ) -> AsyncIterator[StreamItem]:
        try:
            chunks = await client.chat.completions.create(
                model=self.model,
                messages=build_messages(request),
                max_tokens=request.max_output_tokens,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=self.extra_body(request) or None,
            )
        except openai.APIStatusError as exc:
            if exc.status_code in (400, 413, 422):
                overflow = fitting.overflow_in(self._detail(exc), exc.body)
                if overflow is not None:
                    raise _Overflowed(overflow, exc.request_id) from None
            raise self._status_error(exc) from None
        except openai.APITimeoutError as exc:
            if isinstance(exc.__cause__, NOT_SENT):
                raise ProviderError(
                    ErrorType.PROVIDER_ERROR,
                    f"Could not connect to the provider at {self.base_url} in time.",
                    retry=Retry.RETRYABLE,
                ) from None
            # No error type: the outcome is unknown, not a failure (as when the
            # runner's own response clock runs out first).
            raise ProviderError(
                "",
                "The request was sent and the provider did not answer in time; "
                "whether it ran the request is unknown.",
                retry=Retry.UNKNOWN,
            ) from None
        except openai.APIConnectionError as exc:
            # llama-cpp-python's server drops the connection, before any response, on a
            # prompt longer than its context: a drop after connecting may be that.
            sent = not isinstance(exc.__cause__, httpx2.ConnectError)
            if sent and self.fitter.may_overflow(request, settings.REPORTS_CONTEXT_TOKENS):
                raise _Overflowed(fitting.Overflow(window=None, prompt_tokens=None), None) from None
            raise ProviderError(
                ErrorType.PROVIDER_ERROR,
                f"Could not reach the provider at {self.base_url}: {_cause(exc)}.",
                retry=Retry.RETRYABLE,
            ) from None

        request_id = chunks.response.headers.get("x-request-id")
        # Response headers: the provider answered. The runner's stall clock starts.
        yield Heartbeat(request_id=request_id)
        finish_reason: str | None = None
        usage = Usage()
        wrote = False
        try:
            async with chunks:  # closes the response, and so the connection, on cancel
                async for chunk in chunks:
                    request_id = request_id or chunk.id or None
                    if chunk.usage is not None:
                        usage = _usage(chunk.usage)
                    extra = chunk.model_extra or {}
                    if (read := _reading(extra)) is not None:
                        # The prompt's reading so far; at the end, the server's timings of it.
                        yield read
                    text = ""
                    for choice in chunk.choices:
                        if choice.index != 0:
                            continue
                        if choice.delta is not None and choice.delta.content:
                            text += choice.delta.content
                        finish_reason = choice.finish_reason or finish_reason
                    wrote = wrote or bool(text)
                    # A chunk without text (a role, the usage) is a sign of life, no more.
                    if text:
                        yield TextDelta(text)
                    elif read is None:
                        yield Heartbeat(request_id=request_id)
        except openai.APIError as exc:
            if finish_reason is None:  # after the completion signal, a lost tail is harmless
                if not wrote and (overflow := self._overflow_in_stream(request, exc)):
                    raise _Overflowed(overflow, request_id) from None
                raise self._broken_stream(exc, request_id) from None
        except ValueError as exc:  # an event that is not JSON: not a server we understand
            raise ProviderError(
                ErrorType.PROVIDER_ERROR,
                f"The provider sent a malformed stream: {exc}.",
                request_id=request_id,
            ) from None
        if finish_reason is not None:
            if usage.source == "provider":
                self.fitter.learn_usage(request, usage.input_tokens)
            yield Completed(finish_reason, usage, request_id=request_id)
        elif not wrote and (overflow := self._overflow_in_stream(request, None)):
            raise _Overflowed(overflow, request_id)
        # No finish_reason: the stream simply ended, and the runner calls it truncated.

    def _overflow_in_stream(
        self, request: GenerationRequest, exc: openai.APIError | None
    ) -> fitting.Overflow | None:
        """Return the overflow a stream that failed before any text stands for, if any.

        Some servers fail a prompt too long for the context only once the 200 stream has
        begun: with an error event that says so, or (llama-cpp-python) by ending the stream
        with no word at all. A silent end counts as an overflow only when the prompt's
        bytes exceed the context, so that it might be one.
        """
        if exc is not None and (overflow := fitting.overflow_in(self._detail(exc), exc.body)):
            return overflow
        configured = settings.REPORTS_CONTEXT_TOKENS
        if self.fitter.may_overflow(request, configured):
            return fitting.Overflow(window=None, prompt_tokens=None)
        return None

    def _cut_to(
        self, overflowed: _Overflowed, sent: GenerationRequest, configured: int
    ) -> GenerationRequest:
        """Return `sent` cut to what the overflow error says fits, or raise when nothing can."""
        overflow = overflowed.overflow
        if overflow.window:
            self.fitter.learn_window(overflow.window)
        budget = self.fitter.budget(sent, configured)
        if budget <= 0:
            raise self._too_long(overflowed, sent, configured)
        text = fitting.prompt_text(sent)
        # Without the prompt's size in the error, count a token a byte: none is longer.
        tokens = overflow.prompt_tokens or len(text.encode())
        cut = fitting.refit(sent, budget, len(text) / tokens)
        if not any(doc.text for doc in cut.documents):
            raise self._too_long(overflowed, sent, configured)
        return cut

    def _too_long(
        self, overflowed: _Overflowed, sent: GenerationRequest, configured: int
    ) -> ProviderError:
        if overflowed.overflow.window:
            self.fitter.learn_window(overflowed.overflow.window)
        window = self.fitter.context_tokens(configured)
        if sent.passages or sent.notes:
            return ProviderError(
                ErrorType.PROVIDER_REJECTED,
                f"A call of the plan does not fit the model's context window of {window:,} "
                f"tokens with {sent.max_output_tokens:,} tokens kept for its answer: set "
                "REPORTS_CONTEXT_TOKENS to the server's context size.",
                request_id=overflowed.request_id,
                plain=True,
            )
        chars = sum(len(doc.text) for doc in sent.documents)
        return ProviderError(
            ErrorType.PROVIDER_REJECTED,
            f"The input does not fit the model's context window of {window:,} tokens, "
            f"even cut to {chars:,} characters with {sent.max_output_tokens:,} tokens kept "
            "for the report: raise the server's context size or lower "
            "REPORTS_MAX_OUTPUT_TOKENS.",
            request_id=overflowed.request_id,
            plain=True,
        )

    def _status_error(self, exc: openai.APIStatusError) -> ProviderError:
        status, request_id = exc.status_code, exc.request_id
        if status in (401, 403):
            # The provider's own message may quote part of the key: it is not repeated.
            return ProviderError(
                ErrorType.PROVIDER_AUTH,
                f"The provider refused the credentials (HTTP {status}): check OPENAI_API_KEY "
                "and what it is allowed to use.",
                status_code=status,
                request_id=request_id,
            )
        detail = self._detail(exc)
        if status == 429 and (exc.code in SPEND_CAP_CODES or exc.type in SPEND_CAP_CODES):
            return ProviderError(
                ErrorType.PROVIDER_QUOTA,
                f"The provider account's spend cap or quota is used up (HTTP 429): {detail}",
                status_code=status,
                request_id=request_id,
            )
        if status == 429 or status in OVERLOADED:
            wait = retry_after_s(exc.response.headers)
            asked = f"; it asked to wait {wait:g} s" if wait is not None else ""
            return ProviderError(
                ErrorType.RATE_LIMITED,
                f"The provider is busy (HTTP {status}){asked}: {detail}",
                retry=Retry.RETRYABLE,
                retry_after_s=wait,
                status_code=status,
                request_id=request_id,
            )
        if status >= 500 or status == 408:
            return ProviderError(
                ErrorType.PROVIDER_ERROR,
                f"The provider failed (HTTP {status}): {detail}",
                retry=Retry.RETRYABLE,
                status_code=status,
                request_id=request_id,
            )
        return ProviderError(
            ErrorType.PROVIDER_REJECTED,
            f"The provider refused the request (HTTP {status}): {detail}",
            status_code=status,
            request_id=request_id,
        )

    def _broken_stream(self, exc: openai.APIError, request_id: str | None) -> ProviderError:
        if isinstance(exc, openai.APITimeoutError):
            # Only when the runner's stall clock did not end the attempt first.
            return ProviderError(
                ErrorType.STALLED,
                "The provider sent nothing more for longer than the read timeout.",
                request_id=request_id,
            )
        if isinstance(exc, openai.APIConnectionError):
            message = f"The provider's stream broke off: {_cause(exc)}."
        else:  # an error event inside the stream
            message = f"The provider reported an error mid-stream: {self._detail(exc)}"
        # Retryable only while no text has arrived; the runner checks that.
        return ProviderError(
            ErrorType.PROVIDER_ERROR, message, retry=Retry.RETRYABLE, request_id=request_id
        )

    def _detail(self, exc: openai.APIError) -> str:
        body = exc.body
        message = body.get("message") if isinstance(body, dict) else None
        text = " ".join(str(message or body or exc.message).split())
        if self._api_key:
            text = text.replace(self._api_key, "[key]")
        if len(text) > DETAIL_CHARS:
            text = text[: DETAIL_CHARS - 1] + "…"
        return text or "no details given"


class _Overflowed(Exception):
    """The request did not fit the model's context (an error status or a stream's error)."""

    def __init__(self, overflow: fitting.Overflow, request_id: str | None) -> None:
        super().__init__(overflow)
        self.overflow, self.request_id = overflow, request_id


def retry_after_s(headers) -> float | None:
    """Return the wait a `Retry-After` (seconds or HTTP date) or `retry-after-ms` asks for."""
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return _finite(float(ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return _finite(float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    # An HTTP date is wall-clock time by definition; compare it with the wall clock.
    return max(0.0, when.timestamp() - time.time())


def _finite(seconds: float) -> float | None:
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _usage(usage) -> Usage:
    details = usage.prompt_tokens_details
    return Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cached_tokens=details.cached_tokens if details is not None else None,
        source="provider",
    )


def _reading(extra: dict) -> ReadingProgress | None:
    """Return what a llama-server chunk says of its reading of the prompt: a progress
    report while it reads (`prompt_progress`), or its timings once it has written
    (`timings`: the prompt's tokens, those cached, and the milliseconds it read for)."""
    progress, timings = extra.get("prompt_progress"), extra.get("timings")
    try:
        if isinstance(progress, dict):
            return ReadingProgress(
                processed=int(progress["processed"]),
                total=int(progress["total"]),
                cached=int(progress.get("cache") or 0),
                time_ms=float(progress["time_ms"]) if "time_ms" in progress else None,
            )
        if isinstance(timings, dict) and "prompt_n" in timings:
            cached, read = int(timings.get("cache_n") or 0), int(timings["prompt_n"])
            return ReadingProgress(
                processed=cached + read,
                total=cached + read,
                cached=cached,
                time_ms=float(timings["prompt_ms"]) if "prompt_ms" in timings else None,
            )
    except (KeyError, TypeError, ValueError):
        return None  # a shape we do not know: no progress, rather than a failed stream
    return None


def _cause(exc: Exception) -> str:
    """Return the lowest cause's message: 'connection refused' says more than 'error'."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return str(exc) or type(exc).__name__
