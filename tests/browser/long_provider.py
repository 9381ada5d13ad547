"""A test provider that writes a long, valid report fast: the simulated one cannot.

The simulated provider's report is an extract (a summary, five points, ten terms, at
most forty headings), so it stays under about 14,000 characters whatever the input;
the browser tests need one past 50,000 at a high token rate.
"""

from __future__ import annotations

from reports.providers.base import GenerationRequest
from reports.providers.simulated import SimulatedProvider


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


class LongReportProvider(SimulatedProvider):
    """The simulated provider's pacing, with a long report in place of the extract."""

    name = "long"

    def __init__(self, *, chars: int = 60_000, **options) -> None:
        super().__init__(**options)
        self.chars = int(chars)

    def write(self, request: GenerationRequest) -> str:
        return long_report(self.chars)
