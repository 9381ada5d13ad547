"""llama-cpp-python's server (`python -m llama_cpp.server`), as it answers, played by the
fake server (tests/providers/openai_server.py): its wheel builds llama.cpp from source, so
no test makes anyone compile it. Each quirk played here was observed on its 0.3 server and
is listed in docs/providers-tested.md.
"""

from __future__ import annotations

import pytest

from reports.clock import Clock
from reports.models import Attempt
from reports.providers import get_provider
from reports.providers.base import Completed, GenerationRequest, SourceDocument, TextDelta
from reports.providers.fitting import TEMPLATE_TOKENS
from reports.worker.supervisor import Supervisor
from tests.helpers import items_or_error, run_all
from tests.providers.openai_server import OpenAIServer, Reply, point_at

CONTEXT, MAX_OUTPUT = 4096, 1000
# 7 KB of prose: about 2,300 tokens at three characters a token, about 7,000 for a
# byte-level vocabulary (one token a byte): it cannot fit a 4,096-token context whole.
SEVEN_KB = "# Harbour notes\n\n" + "Tides turn turbines in narrow harbours. " * 175
FREE = {"input": 0, "output": 0, "cached_input": 0}
# Its overflow: a 200 stream that ends before any text, the reason only in its log.
SILENT_END = Reply(text=(), finish_reason=None, usage=None, end="eof")
# Or, in some versions, an error event inside the 200 stream.
OVERFLOW_EVENT = Reply(
    text=(),
    finish_reason=None,
    usage=None,
    end="error_event",
    error={"message": "Requested tokens (7168) exceed context window of 4096", "type": "error"},
)
NO_USAGE = Reply(usage=None)  # stream_options.include_usage is ignored


@pytest.fixture
def llama_cpp_python(settings):
    """The fake server, counting tokens at /extras/tokenize as llama-cpp-python does (a
    token a byte, as the byte-level vocabulary of the models it was tried with)."""
    server = OpenAIServer(tokenize_path="/extras/tokenize").start()
    point_at(settings, server.base_url, read_timeout_s=30)
    settings.REPORTS_PRICES = {**settings.REPORTS_PRICES, "test-model": FREE}
    settings.REPORTS_CONTEXT_TOKENS = CONTEXT
    settings.REPORTS_MAX_OUTPUT_TOKENS = MAX_OUTPUT
    yield server
    server.stop()


def request(text: str) -> GenerationRequest:
    return GenerationRequest(
        "t", 1, (SourceDocument("doc.md", text),), max_output_tokens=MAX_OUTPUT
    )


def prompt_of(body: dict) -> str:
    return "\n".join(message["content"] for message in body["messages"])


def fits(body: dict) -> bool:
    """Whether a request's prompt, counted a token a byte, fits the context."""
    return len(prompt_of(body).encode()) + TEMPLATE_TOKENS + body["max_tokens"] <= CONTEXT


async def test_its_tokenizer_is_found_at_extras_tokenize_and_the_input_cut_to_fit(
    llama_cpp_python,
):
    provider = get_provider("openai")
    items, exc = await items_or_error(provider, request(SEVEN_KB))
    assert exc is None and isinstance(items[-1], Completed)
    assert provider.fitter.tokenize_path == "/extras/tokenize"
    (sent,) = llama_cpp_python.requests
    assert fits(sent.body)  # cut before sending: no overflow
    assert "was cut" in sent.body["messages"][1]["content"]


@pytest.mark.parametrize("overflow", [SILENT_END, OVERFLOW_EVENT], ids=["silent", "event"])
async def test_an_overflow_inside_its_200_stream_is_retried_once_with_the_input_cut(
    llama_cpp_python, overflow
):
    provider = get_provider("openai")
    provider.fitter.probed = True  # as for a server whose tokenizer was not found
    llama_cpp_python.queue(overflow)
    items, exc = await items_or_error(provider, request(SEVEN_KB))
    assert exc is None
    assert "".join(i.text for i in items if isinstance(i, TextDelta)).startswith("# A report")
    first, second = llama_cpp_python.requests
    assert not fits(first.body)
    if overflow is SILENT_END:  # no count given: the cut counts a token a byte
        assert fits(second.body)
    else:  # cut by the count the error gave: 7,168 tokens for the first prompt
        tokens = len(prompt_of(second.body)) * 7168 / len(prompt_of(first.body))
        assert tokens + TEMPLATE_TOKENS + MAX_OUTPUT <= CONTEXT


@pytest.mark.django_db
@pytest.mark.usefixtures("worker_thread")
def test_without_usage_a_free_models_task_settles_at_an_estimate_never_for_an_admin(
    llama_cpp_python, make_task
):
    llama_cpp_python.queue(NO_USAGE)
    task = make_task()
    run_all(Supervisor(slots=1, clock=Clock()))
    task.refresh_from_db()
    attempt = Attempt.objects.get(task=task)
    assert task.status == "succeeded"
    assert (attempt.usage_source, task.cost_status, task.cost_micros) == (
        "estimate",
        "settled",
        0,
    )
    assert attempt.output_tokens > 0
