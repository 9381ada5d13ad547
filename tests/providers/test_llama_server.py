"""The `openai` provider against llama.cpp's own `llama-server`, with a real instruct model:
SmolLM2-135M-Instruct (tests/providers/llama_server.py). Every count is checked against the
server's own counters (`/metrics`) and every stop against its slots (`/slots`); the
dialect it shows is written down in docs/providers-tested.md.

The model reads about 25 to 150 prompt tokens a second on two busy cores and writes 20 to
90: the tests ask for few tokens. One server (two slots of 2,048 tokens) serves them all
but the read of a long document, whose server bounds every answer by a grammar so that
each part's notes end (`llama_server.BULLETS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from asgiref.sync import sync_to_async

from reports import lifecycle
from reports.clock import Clock
from reports.models import Attempt, PlanCall, SourcePassage, Task
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
from tests.providers.llama_server import MODEL, LlamaServer

# One test process runs them all (scripts/test spreads the suite over two), so that the run
# starts each of the session's servers once.
pytestmark = pytest.mark.xdist_group("smollm2")

FREE = {"input": 0, "output": 0, "cached_input": 0}
WINDOW = 2048  # each slot's, as the session's server is started (tests/conftest.py)
# The ends a task on a small model may truly have: success, or the model's own failure.
TRUE_ENDS = {
    ("succeeded", None),
    ("failed", "validation_failed"),
    ("failed", "degenerate_output"),
    ("failed", "stream_truncated"),
    ("failed", "empty_output"),
}
SHORT = "# Harbour note\n\nThe tide turns at noon. The harbour master logs every ship."
# About 4,500 of SmolLM2's tokens: more than twice a slot's window (checked below).
HARBOURS = "\n\n".join(
    f"## Harbour {n}\n\nThe harbour of site {n} has a narrow entrance that speeds up the tide. "
    f"Engineers measured the flow there for {n + 2} months and placed {n % 4 + 1} turbines "
    "where the water runs fastest. The turbines produced steady power for eight hours a "
    "day, and maintenance cost less than expected because the water is sheltered. "
    "Fishermen asked that the turbines stay clear of the channel; the harbour master "
    "agreed and marked them with buoys."
    for n in range(1, 51)
)
LONG = "# Tidal power in fifty harbours\n\n" + HARBOURS


def point_at(settings, server: LlamaServer) -> LlamaServer:
    """Point the `openai` provider at `server`, SmolLM2 priced 0 (a local model)."""
    settings.REPORTS_PROVIDER = "openai"
    settings.REPORTS_MODEL = MODEL
    settings.REPORTS_PRICES = {**settings.REPORTS_PRICES, MODEL: FREE}
    settings.REPORTS_PROVIDERS = {
        **settings.REPORTS_PROVIDERS,
        "openai": {
            "BACKEND": "reports.providers.openai.OpenAIProvider",
            "OPTIONS": {"base_url": server.base_url, "read_timeout_s": 300},
        },
    }
    settings.REPORTS_CONTEXT_TOKENS = WINDOW
    settings.REPORTS_MAX_OUTPUT_TOKENS = 64
    # Reading a prompt on a shared CPU is slow: the runner must not take it for a stall.
    settings.REPORTS_PROVIDER_RESPONSE_TIMEOUT_S = 300
    settings.REPORTS_STALL_TIMEOUT_S = 300
    settings.REPORTS_TASK_DEADLINE_S = 900
    server.wait_until_idle()  # counters read from here are this test's alone
    return server


@pytest.fixture
def on_smollm2(settings, smollm2_server) -> LlamaServer:
    return point_at(settings, smollm2_server)


@pytest.fixture
def on_bounded_smollm2(settings, bounded_smollm2_server) -> LlamaServer:
    return point_at(settings, bounded_smollm2_server)


def request(text: str = SHORT, max_output_tokens: int = 64) -> GenerationRequest:
    return GenerationRequest(
        "t", 1, (SourceDocument("doc.md", text),), max_output_tokens=max_output_tokens
    )


def text_of(items) -> str:
    return "".join(item.text for item in items if isinstance(item, TextDelta))


def counted(server: LlamaServer, before: dict[str, float]) -> dict[str, int]:
    """Return the tokens the server read (whether from its cache or not) and wrote since
    `before`, once it is idle."""
    server.wait_until_idle()
    after = server.metrics()

    def grew(name: str) -> int:
        return int(after[name] - before[name])

    read = grew("prompt_tokens_total") + grew("prompt_tokens_cached_total")
    return {
        "input": read,
        "cached": grew("prompt_tokens_cached_total"),
        "output": grew("tokens_predicted_total"),
    }


# --- the stream, as the provider sees it --------------------------------------------------


async def test_a_stream_reports_the_usage_the_server_counted(on_smollm2):
    before = on_smollm2.metrics()
    items, exc = await items_or_error(get_provider("openai"), request(max_output_tokens=24))
    assert exc is None
    assert text_of(items).strip()
    done = items[-1]
    assert isinstance(done, Completed) and done.finish_reason in ("stop", "length")
    # llama-server honours stream_options.include_usage: the last chunk carries usage,
    # and it is what the server itself counted.
    server = await asyncio.to_thread(counted, on_smollm2, before)
    usage = done.usage
    assert usage.source == "provider"
    assert (usage.input_tokens, usage.output_tokens) == (server["input"], server["output"])
    assert usage.cached_tokens == server["cached"]


async def test_the_output_cap_ends_the_stream_with_finish_reason_length(on_smollm2):
    before = on_smollm2.metrics()
    items, exc = await items_or_error(get_provider("openai"), request(max_output_tokens=3))
    assert exc is None
    done = items[-1]
    assert (done.finish_reason, done.usage.output_tokens) == ("length", 3)
    assert (await asyncio.to_thread(counted, on_smollm2, before))["output"] == 3


async def test_an_overflow_is_answered_400_and_the_input_is_cut_to_the_window_it_names(
    on_smollm2, settings
):
    # Reportline is told of a window four times the server's: the prompt, counted by the
    # server's own tokenizer, fits what it was told and is sent whole.
    settings.REPORTS_CONTEXT_TOKENS = 4 * WINDOW
    provider = get_provider("openai")
    # A large output cap leaves little room once the window is known: the cut prompt is
    # read in seconds. The test stops reading at the first text.
    long = request(LONG[: len(LONG) // 2], max_output_tokens=1300)
    assert on_smollm2.tokens(long.documents[0].text) > WINDOW
    before = on_smollm2.metrics()
    async with contextlib.aclosing(provider.stream(long)) as items:
        async for item in items:
            if isinstance(item, TextDelta) and item.text:
                break
        else:
            pytest.fail("no text after the input was cut")
    # llama-server refused the whole prompt with a 400 naming its window (nothing was
    # read for it), and the prompt sent again fitted that window.
    assert provider.fitter.window == WINDOW
    read = (await asyncio.to_thread(counted, on_smollm2, before))["input"]
    assert 0 < read < WINDOW


# --- tasks, through the worker -------------------------------------------------------------


def run_one_task(make_task, server: LlamaServer, content: str):
    """Run one task to its end; return it, its attempt and what the server counted."""
    before = server.metrics()
    task = make_task(content=content)
    run_all(Supervisor(slots=1, clock=Clock()))
    task.refresh_from_db()
    attempt = Attempt.objects.get(task=task)
    # A true end: the model's own success or failure, never the chain's.
    assert (task.status, task.error_type or None) in TRUE_ENDS, (task.status, task.error_type)
    assert attempt.text.strip()
    return task, attempt, counted(server, before)


# Its writes commit, as a worker's do (run inside one test transaction on PostgreSQL,
# the attempt ended lease_lost a few seconds into its call).
@pytest.mark.django_db(transaction=True)
def test_a_task_ends_truly_charged_what_the_server_counted_and_settles_free(on_smollm2, make_task):
    # Left alone, SmolLM2 writes on to the cap here: the report ends cut, stream_truncated.
    task, attempt, server = run_one_task(make_task, on_smollm2, SHORT)
    assert attempt.usage_source == "provider"
    assert (attempt.input_tokens, attempt.output_tokens) == (server["input"], server["output"])
    assert (task.cost_status, task.cost_micros) == ("settled", 0)  # no admin needed


@pytest.mark.timeout(900)
# Its writes commit, as a worker's do (run inside one test transaction on PostgreSQL,
# the attempt ended lease_lost a few seconds into its call).
@pytest.mark.django_db(transaction=True)
def test_a_document_twice_the_window_is_read_whole_and_its_free_task_ends_truly(
    on_bounded_smollm2, make_task, settings
):
    # Bounded answers end (`llama_server.BULLETS`): each part's notes are written; left
    # alone, SmolLM2 loops to the cap in the first part's notes and the task ends there,
    # stream_truncated (docs/providers-tested.md).
    settings.REPORTS_PLAN_PARALLEL_CALLS = on_bounded_smollm2.slots
    settings.REPORTS_MAX_OUTPUT_TOKENS = 128  # more than two bullets can take
    document_tokens = on_bounded_smollm2.tokens(LONG)
    assert document_tokens > 2 * WINDOW
    task, attempt, server = run_one_task(make_task, on_bounded_smollm2, LONG)
    # The final call's bullets are no report.
    assert (task.status, task.error_type) == ("failed", "validation_failed")
    # Read in parts, every passage in a part whose notes were written, every token of
    # the document read by the server.
    parts = PlanCall.objects.filter(task=task, kind="part", status="succeeded")
    assert len(parts) == task.plan["parts"] >= 2
    read = [n for part in parts for n in range(part.first_passage, part.last_passage + 1)]
    assert read == list(range(1, SourcePassage.objects.filter(task=task).count() + 1))
    assert server["input"] > document_tokens
    # The usage charged is what the server counted, over every call of the plan.
    assert attempt.usage_source == "provider"
    assert (attempt.input_tokens, attempt.output_tokens) == (server["input"], server["output"])
    # A free model: settled at 0 by itself, nothing left for an admin.
    assert (task.cost_status, task.cost_micros) == ("settled", 0)


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


@pytest.mark.django_db(transaction=True)
async def test_a_cancel_stops_the_server_generating_within_two_seconds(
    on_smollm2, make_task, settings
):
    settings.REPORTS_MAX_OUTPUT_TOKENS = 1000  # about a minute of writing, were it let run
    task = await sync_to_async(make_task)(content=SHORT)
    provider = Watched(get_provider("openai"))
    worker = Supervisor(slots=1, clock=Clock(), provider=provider)
    assert await worker.claim_and_start()
    await asyncio.wait_for(provider.wrote.wait(), 120)
    assert await asyncio.to_thread(on_smollm2.busy_slots) == 1
    asked = time.monotonic()
    assert await sync_to_async(lambda: lifecycle.cancel_task(Task.objects.get(pk=task.pk)))()
    await worker.wait_for_attempts()
    await asyncio.to_thread(on_smollm2.wait_until_idle, 2.0)
    assert time.monotonic() - asked < 2.0  # the slot is free: the server stopped writing
    task = await Task.objects.aget(pk=task.pk)
    assert (task.status, task.cost_status, task.cost_micros) == ("cancelled", "settled", 0)
    attempt = await Attempt.objects.aget(task=task)
    assert attempt.text and attempt.output_tokens > 0
