"""Measure what the `openai` adapter itself adds: against the test suite's local server
(real sockets, no model), the time to response headers and to first text of a request,
how fast it turns a long stream into deltas, and the cost of building the prompt.

Run: .venv/bin/python bench/openai_adapter.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only")
os.environ["REPORTS_DATA_DIR"] = tempfile.mkdtemp(prefix="reportline-bench-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django

django.setup()

from reports.providers.base import (  # noqa: E402
    GenerationRequest,
    Heartbeat,
    SourceDocument,
    TextDelta,
)
from reports.providers.openai import OpenAIProvider  # noqa: E402
from reports.providers.prompts import build_messages, fit_to_context  # noqa: E402
from tests.providers.openai_server import OpenAIServer, Reply  # noqa: E402

RUNS = 50
SAMPLE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "sample_article.md"
REQUEST = GenerationRequest("bench", 1, (SourceDocument("article.md", SAMPLE.read_text()),))


def row(name: str, values: list[float], unit: str = "ms") -> None:
    print(
        f"| {name} | {statistics.median(values):,.1f} {unit} | {min(values):,.1f} {unit} "
        f"| {max(values):,.1f} {unit} |"
    )


async def first_text(provider: OpenAIProvider) -> tuple[float, float]:
    start = time.perf_counter()
    headers = text = None
    async for item in provider.stream(REQUEST):
        now = (time.perf_counter() - start) * 1000
        if isinstance(item, Heartbeat) and headers is None:
            headers = now
        if isinstance(item, TextDelta) and text is None:
            text = now
    return headers, text


async def long_stream(provider: OpenAIProvider, server: OpenAIServer) -> float:
    pieces = tuple(" word" for _ in range(6_000))  # ~5,000 words, one chunk each
    server.queue(Reply(text=pieces))
    start = time.perf_counter()
    count = 0
    async for item in provider.stream(REQUEST):
        count += isinstance(item, TextDelta)
    assert count == len(pieces)
    return count / (time.perf_counter() - start)


async def main() -> None:
    server = OpenAIServer().start()
    provider = OpenAIProvider(base_url=server.base_url, api_key="bench", model="bench")
    try:
        await first_text(provider)  # warm up: imports, the SDK's lazy resources
        timings = [await first_text(provider) for _ in range(RUNS)]
        rates = [await long_stream(provider, server) for _ in range(5)]
    finally:
        server.stop()
    document = SourceDocument("big.md", SAMPLE.read_text() * 60)
    prompt_ms = []
    for _ in range(20):
        start = time.perf_counter()
        fitted = fit_to_context([document], "", context_tokens=32_000, max_output_tokens=8_192)
        build_messages(GenerationRequest("bench", 1, fitted))
        prompt_ms.append((time.perf_counter() - start) * 1000)

    print(f"{RUNS} requests against the local server; medians of the runs\n")
    print("| measure | median | min | max |\n|---|---|---|---|")
    row("request → response headers", [h for h, _ in timings])
    row("request → first text", [t for _, t in timings])
    row("deltas per second, one long stream", rates, unit="/s")
    row(f"fit + build the prompt, {len(document.text):,}-char document", prompt_ms)


if __name__ == "__main__":
    asyncio.run(main())
