"""The `openai` provider against a real inference server nobody here wrote: llama.cpp,
through llama-cpp-python's OpenAI-compatible server, with a tiny model made on the spot
(tests/providers/llama_server.py). The dialect differences it shows are listed in
docs/providers-tested.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import httpx2
import pytest
from asgiref.sync import sync_to_async

from reports import lifecycle
from reports.clock import Clock
from reports.models import Attempt, Task
from reports.providers import get_provider
from reports.providers.base import (
    Completed,
    GenerationRequest,
    Provider,
    SourceDocument,
    TextDelta,
)
from reports.worker.supervisor import Supervisor
from tests.helpers import items_or_error, run_all
from tests.providers.llama_server import (
    CONTEXT,
    ENDLESS,
    ENDLESS_CONTEXT,
    MODEL,
    WALK,
    LlamaServer,
    installed,
)

# 7 KB of prose: about 2,300 tokens at three characters a token, about 7,000 for this
# byte-level vocabulary: it cannot fit a 4,096-token context whole.
SEVEN_KB = "# Harbour notes\n\n" + "Tides turn turbines in narrow harbours. " * 175
FREE = {"input": 0, "output": 0, "cached_input": 0}
MAX_OUTPUT = 1000


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    if not installed():
        message = "llama-cpp-python's server is not installed (scripts/test installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    server = LlamaServer(Path(tmp_path_factory.mktemp("llama"))).start()
    yield server
    server.stop()


@pytest.fixture
def on_llama(settings, llama_server) -> LlamaServer:
    """Point the `openai` provider at the server's stopping model, priced 0 (a local one)."""
    settings.REPORTS_PROVIDER = "openai"
    settings.REPORTS_MODEL = MODEL
    settings.REPORTS_PRICES = {**settings.REPORTS_PRICES, MODEL: FREE, ENDLESS: FREE}
    settings.REPORTS_PROVIDERS = {
        **settings.REPORTS_PROVIDERS,
        "openai": {
            "BACKEND": "reports.providers.openai.OpenAIProvider",
            "OPTIONS": {"base_url": llama_server.base_url, "read_timeout_s": 30},
        },
    }
    settings.REPORTS_CONTEXT_TOKENS = CONTEXT
    settings.REPORTS_MAX_OUTPUT_TOKENS = MAX_OUTPUT
    return llama_server


def request(text: str = "A short note on harbours.", max_output_tokens: int = MAX_OUTPUT):
    return GenerationRequest(
        "t", 1, (SourceDocument("doc.md", text),), max_output_tokens=max_output_tokens
    )


def text_of(items) -> str:
    return "".join(item.text for item in items if isinstance(item, TextDelta))


# --- the stream, as the provider sees it --------------------------------------------------


async def test_a_normal_stream_writes_its_text_and_stops_without_usage(on_llama):
    items, exc = await items_or_error(get_provider("openai"), request())
    assert exc is None
    assert text_of(items) == WALK
    done = items[-1]
    assert isinstance(done, Completed) and done.finish_reason == "stop"
    # llama-cpp-python's server ignores stream_options.include_usage.
    assert done.usage.source == "missing"


async def test_the_output_cap_ends_the_stream_with_finish_reason_length(on_llama):
    items, exc = await items_or_error(get_provider("openai"), request(max_output_tokens=5))
    assert exc is None
    assert text_of(items) == WALK[:5]
    assert (items[-1].finish_reason, len(WALK[:5])) == ("length", 5)


async def test_the_servers_tokenizer_counts_the_prompt_a_token_a_byte(on_llama):
    provider = get_provider("openai")
    async with httpx2.AsyncClient() as http:
        assert await provider.fitter.count(http, "Xyz 123") == 7  # no merge applies
        fitted = await provider.fitter.fit(http, request(SEVEN_KB), CONTEXT)
    assert provider.fitter.tokenize_path == "/extras/tokenize"
    (document,) = fitted.documents
    assert document.full_chars == len(SEVEN_KB)  # cut, and the prompt says so
    assert 0 < len(document.text) < len(SEVEN_KB)
    items, exc = await items_or_error(provider, fitted)
    assert (exc, text_of(items)) == (None, WALK)


async def test_an_overflow_inside_the_stream_is_retried_with_the_input_cut(on_llama):
    provider = get_provider("openai")
    provider.fitter.probed = True  # as for a server without a tokenizer endpoint
    overflow = f"exceed context window of {CONTEXT}"
    seen = on_llama.log_text().count(overflow)
    items, exc = await items_or_error(provider, request(SEVEN_KB))
    assert exc is None
    assert text_of(items) == WALK
    # The first request did overflow, inside its 200 stream.
    assert on_llama.wait_for_log(overflow, seen=seen)


class Watched(Provider):
    """A provider that says when the first text of its stream arrived."""

    def __init__(self, inner: Provider) -> None:
        super().__init__()
        self.inner, self.name = inner, inner.name
        self.wrote = asyncio.Event()

    async def stream(self, request):
        async with contextlib.aclosing(self.inner.stream(request)) as items:
            async for item in items:
                if isinstance(item, TextDelta) and item.text:
                    self.wrote.set()
                yield item


# --- tasks, through the worker -------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("worker_thread")
def test_a_7kb_document_reaches_the_model_and_its_free_task_settles(on_llama, make_task):
    task = make_task(content=SEVEN_KB)
    run_all(Supervisor(slots=1, clock=Clock()))
    task.refresh_from_db()
    attempt = Attempt.objects.get(task=task)
    assert attempt.text == WALK  # the model was used: text arrived
    # A tiny model writes no report: the text arrived whole and failed the check.
    assert (task.status, task.error_type) == ("failed", "validation_failed")
    assert (task.cost_status, task.cost_micros) == ("settled", 0)
    # Every call of its plan (the window is small: the document is read in parts) counts.
    assert (attempt.usage_source, attempt.output_tokens) == ("estimate", 12 * task.plan["calls"])


@pytest.mark.django_db(transaction=True)
async def test_a_cancel_closes_the_connection_the_server_was_writing_to(
    on_llama, make_task, settings
):
    # Room for a stream far longer than the time it takes to cancel it.
    settings.REPORTS_MODEL = ENDLESS
    settings.REPORTS_CONTEXT_TOKENS = ENDLESS_CONTEXT
    settings.REPORTS_MAX_OUTPUT_TOKENS = ENDLESS_CONTEXT - CONTEXT
    task = await sync_to_async(make_task)()
    provider = Watched(get_provider("openai"))
    worker = Supervisor(slots=1, clock=Clock(), provider=provider)
    assert await worker.claim_and_start()
    await asyncio.wait_for(provider.wrote.wait(), 30)
    closed = "Disconnected from client"
    seen = on_llama.log_text().count(closed)
    assert await sync_to_async(lambda: lifecycle.cancel_task(Task.objects.get(pk=task.pk)))()
    await worker.wait_for_attempts()
    # The server saw the connection close and stopped writing.
    assert await asyncio.to_thread(on_llama.wait_for_log, closed, seen=seen)
    task = await Task.objects.aget(pk=task.pk)
    assert (task.status, task.cost_status, task.cost_micros) == ("cancelled", "settled", 0)
    attempt = await Attempt.objects.aget(task=task)
    assert attempt.usage_source == "estimate" and attempt.output_tokens > 0
