"""A test provider that writes a long, valid report fast: the simulated one cannot.

The simulated provider's report is an extract (a summary, five points, ten terms, at
most forty headings), so it stays under about 14,000 characters whatever the input;
the browser tests need one past 50,000 at a high token rate.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from reports.clock import Clock
from reports.providers.base import (
    Completed,
    GenerationRequest,
    Heartbeat,
    Provider,
    StreamItem,
    TextDelta,
    Usage,
)
from reports.providers.simulated import estimate_tokens, tokenize


def long_report(chars: int) -> str:
    """Return a valid report of at least `chars` characters; every sentence is unique."""
    parts = [
        "# A long report\n",
        "## Summary\n\nThis report is long on purpose, to show the page keeps up.\n",
    ]
    size = sum(len(p) for p in parts)
    n = 0
    while size < chars:
        section = [f"## Section {n // 20 + 1}\n"] if n % 20 == 0 else []
        sentences = " ".join(
            f"Sentence {n * 8 + k} of the long report says something new." for k in range(8)
        )
        section.append(sentences + "\n")
        chunk = "\n".join(section) + "\n"
        parts.append(chunk)
        size += len(chunk)
        n += 1
    return "\n".join(parts)


class LongReportProvider(Provider):
    name = "long"

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        chars: int = 60_000,
        tokens_per_s: float = 10_000,
        ttft_s: float = 1.0,
        **options,
    ) -> None:
        super().__init__(clock=clock, **options)
        self.chars = int(chars)
        self.tokens_per_s = float(tokens_per_s)
        self.ttft_s = float(ttft_s)

    async def stream(self, request: GenerationRequest) -> AsyncIterator[StreamItem]:
        yield Heartbeat()
        text = long_report(self.chars)
        # Time to first token: the page is connected before the text starts.
        await self.clock.sleep(self.ttft_s)
        start = self.clock.monotonic()
        for index, token in enumerate(tokenize(text)):
            ahead = start + index / self.tokens_per_s - self.clock.monotonic()
            if ahead > 0.005:
                await self.clock.sleep(ahead)
            yield TextDelta(token)
        yield Completed(
            "stop",
            Usage(
                input_tokens=estimate_tokens(sum(len(d.text) for d in request.documents)),
                output_tokens=estimate_tokens(len(text)),
                source="estimate",
            ),
            request_id=f"long-{request.task_id[:8]}",
        )
