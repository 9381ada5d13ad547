"""A provider that needs no network: streams `write_report`'s text at a model's pace.

Scenarios (docs/providers.md) make it misbehave on purpose, for demos and tests. The pace is a
steady token rate, or a profile modelled on a real provider (`reports.providers.pacing`),
deterministic for a given seed.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from reports.clock import Clock
from reports.models import ErrorType
from reports.providers import SCENARIOS, pacing
from reports.providers.base import (
    Completed,
    GenerationRequest,
    Heartbeat,
    Provider,
    ProviderError,
    Retry,
    StreamItem,
    TextDelta,
)
from reports.providers.prompts import estimated_usage, prompt_chars
from reports.providers.report_writer import tokenize, write_report

HEARTBEAT_S = 1.0
SLOW_TTFT_S = 3.0
SLOW_TOKENS_PER_S = 10.0
ERROR_AT = 0.3  # share of the report sent before the "error" scenario disconnects
TRUNCATE_AT = 0.4  # share of the report sent before the "truncated" scenario ends
# Float sums of due times land a hair short of the due time; that is "on time".
_EPSILON = 1e-9

# About four characters a token, with the whitespace before it attached, so that


def _unstructured(report: str) -> str:
    # The "invalid" scenario: a model that ignored the format; no heading survives.
    return re.sub(r"^#{1,6}[ \t]+", "", report, flags=re.MULTILINE)


class SimulatedProvider(Provider):
    name = "simulated"
    learns_from_calls = False
    plays_scenarios = True
    in_process = True

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        ttft_s: float = 0.45,
        tokens_per_s: float = 60.0,
        profile: str = "",
        seed: int = 0,
        **options,
    ) -> None:
        if ttft_s < 0 or tokens_per_s <= 0:
            raise ValueError("ttft_s must be >= 0 and tokens_per_s > 0.")
        super().__init__(
            clock=clock,
            ttft_s=ttft_s,
            tokens_per_s=tokens_per_s,
            profile=profile,
            seed=seed,
            **options,
        )
        self.ttft_s = float(ttft_s)
        self.tokens_per_s = float(tokens_per_s)
        # A profile, when named, replaces the steady pace (ttft_s, tokens_per_s).
        self.profile = pacing.profile_named(profile) if profile else None
        self.seed = int(seed)

    def write(self, request: GenerationRequest) -> str:
        """Return the whole report this provider streams for `request`."""
        return write_report(
            request.documents,
            request.instructions,
            purpose=request.purpose,
            passages=request.passages,
            notes=request.notes,
            max_tokens=request.max_output_tokens,
            read_by_ocr=request.read_by_ocr,
            title=request.title,
        )

    async def stream(self, request: GenerationRequest) -> AsyncIterator[StreamItem]:
        scenario = request.scenario or "ok"
        if scenario not in SCENARIOS:
            raise ProviderError(
                ErrorType.PROVIDER_REJECTED,
                f"The simulated provider has no scenario {scenario!r}.",
                status_code=400,
            )
        if scenario == "rate_limited" and request.attempt_number == 1:
            raise ProviderError(
                ErrorType.RATE_LIMITED,
                "The provider asked us to wait 2 s.",
                retry=Retry.RETRYABLE,
                retry_after_s=2,
                status_code=429,
            )
        start = self.clock.monotonic()
        # The provider has answered (as response headers would say); text comes later.
        yield Heartbeat()
        if scenario == "stall":
            while True:
                await self.clock.sleep(HEARTBEAT_S)
                yield Heartbeat()

        text = ""
        if scenario != "empty":
            # Off the event loop: a 200,000-character document takes a noticeable moment.
            text = await asyncio.to_thread(self.write, request)
        if scenario == "invalid":
            text = _unstructured(text)
        tokens = tokenize(text)
        finish_reason = "stop"
        if len(tokens) > request.max_output_tokens:
            tokens, finish_reason = tokens[: request.max_output_tokens], "length"
        if scenario == "error":
            tokens = tokens[: max(1, int(len(tokens) * ERROR_AT))]
        elif scenario == "truncated":
            tokens = tokens[: max(1, int(len(tokens) * TRUNCATE_AT))]

        schedule = self.schedule(request, tokens)
        first_due = start + schedule.ttft_s
        while await self._nap_until(first_due):
            yield Heartbeat()
        # Each chunk has a due time from one start, so oversleeping (a busy loop, a
        # coarse timer) is caught up by sending every chunk already due, not by drifting.
        for offset, chunk in schedule.chunks:
            due = first_due + offset
            while await self._nap_until(due):
                yield Heartbeat()
            yield TextDelta(chunk)

        if scenario == "error":
            raise ProviderError(
                ErrorType.PROVIDER_ERROR,
                "The provider closed the connection mid-stream.",
                retry=Retry.RETRYABLE,
            )
        if scenario == "truncated":
            return
        # Counted as a call it was cancelled in, or whose stream dropped, is estimated
        # (attempt_end.call_usage): the prompt sent and the text written, so that a call cut
        # short never costs more than the whole call.
        yield Completed(
            finish_reason,
            estimated_usage(prompt_chars(request), "".join(tokens)),
            request_id=f"sim-{request.task_id[:8]}-{request.attempt_number}",
        )

    def schedule(self, request: GenerationRequest, tokens: list[str]) -> pacing.Schedule:
        """Return when each piece of the text is sent: the profile's pace, or steady."""
        if request.scenario == "slow":
            return pacing.steady(tokens, SLOW_TTFT_S, SLOW_TOKENS_PER_S)
        if self.profile is None:
            return pacing.steady(tokens, self.ttft_s, self.tokens_per_s)
        key = f"{request.task_id}:{request.attempt_number}"
        return pacing.plan(self.profile, "".join(tokens), seed=self.seed, key=key)

    async def _nap_until(self, due: float) -> bool:
        """Sleep towards `due`, at most one heartbeat long; say whether it is still ahead
        (a heartbeat is owed).

        A nap that reaches `due` ends it: the event loop's timers may wake a hair early
        (uvloop's count whole milliseconds), and waking early is not a heartbeat's worth
        of silence. Napping again, with a heartbeat, made the provider spin: under uvloop
        a nap of less than a millisecond returns at once (nine heartbeats a chunk).
        """
        left = due - self.clock.monotonic()
        if left <= _EPSILON:
            return False
        if left <= HEARTBEAT_S:
            await self.clock.sleep(left)
            return False
        await self.clock.sleep(HEARTBEAT_S)
        return True
