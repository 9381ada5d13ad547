"""The output's guards through the real runner, against the local OpenAI-compatible server
over real sockets: a provider that ignores `max_tokens` is cut at the output cap, and a
stream that loops is stopped.

Run on SQLite and on PostgreSQL (DATABASE_URL).
"""

from __future__ import annotations

import pytest

from reports import budgets, wording
from reports.clock import Clock
from reports.models import Attempt, ErrorType, PlanCall, Task
from reports.worker.attempt_core import cap_chars
from reports.worker.supervisor import Supervisor
from tests.helpers import run_all
from tests.providers.openai_server import Reply, point_at

CAP = 500  # REPORTS_MAX_OUTPUT_TOKENS in these tests
HEAD = ("# A report\n\n", "## Summary\n\n")


def endless_prose(pieces: int) -> tuple[str, ...]:
    """Text that never repeats itself, about 1 KB a piece: a model that ignores the cap."""
    return tuple(" ".join(f"fact{i}-{j}" for j in range(120))[:1078] + "\n" for i in range(pieces))


@pytest.fixture
def openai_worker(settings, openai_server, worker_thread) -> Supervisor:
    point_at(settings, openai_server.base_url, read_timeout_s=30)
    settings.REPORTS_MAX_OUTPUT_TOKENS = CAP
    settings.REPORTS_STALL_TIMEOUT_S = 2  # what today's runner waited for, at the least
    return Supervisor(slots=4, clock=Clock())


def ended(task: Task, alice_client) -> tuple[dict, Attempt]:
    found = alice_client.get(f"/api/tasks/{task.pk}").json()
    return found, Attempt.objects.get(task=task)


@pytest.mark.django_db
def test_a_provider_that_ignores_max_tokens_is_cut_at_the_cap_and_charged_no_more(
    openai_server, openai_worker, make_task, alice_client
):
    # The red team's provider: 3,000,390 characters in 2,782 events, then a completion
    # reporting 750,060 output tokens.
    text = (*HEAD, *endless_prose(2780))
    usage = {"prompt_tokens": 300, "completion_tokens": 750_060, "total_tokens": 750_360}
    openai_server.queue(Reply(text=text, usage=usage))
    task = make_task()

    run_all(openai_worker)

    found, attempt = ended(task, alice_client)
    assert openai_server.requests[0].body["max_tokens"] == CAP
    assert (found["status"], found["error"]["type"]) == ("failed", "stream_truncated")
    assert found["partial"] is True
    # What is kept is what arrived up to the cap, nothing past it.
    assert len(attempt.text) == cap_chars(CAP)
    assert "".join(text).startswith(attempt.text)
    # Charged at most at the cap: the output the reservation was made for.
    assert attempt.output_tokens == CAP
    task.refresh_from_db()
    allowed = budgets.usage_cost("test-model", attempt.input_tokens, CAP, None)
    assert task.cost_status == "settled"
    assert attempt.cost_micros == task.cost_micros <= allowed


@pytest.mark.django_db
def test_the_call_past_the_cap_is_closed_at_once(
    openai_server, openai_worker, make_task, alice_client
):
    # A provider that goes on writing and keeps the connection open.
    openai_server.queue(
        Reply(text=(*HEAD, *endless_prose(20)), finish_reason=None, usage=None, end="hang")
    )
    task = make_task()

    run_all(openai_worker)

    # The server saw the client hang up: the call was cut, not waited out.
    assert openai_server.client_closed.wait(10)
    found, attempt = ended(task, alice_client)
    assert found["error"]["type"] == "stream_truncated"
    assert f"output cap of {CAP:,} tokens" in found["error"]["message"]
    assert len(attempt.text) == cap_chars(CAP)
    assert attempt.output_tokens == CAP and attempt.usage_source == "estimate"


LOOP = ("Here is the code:\n\n", *["<pre><code>"] * 3000)


@pytest.mark.django_db
def test_a_looping_stream_is_stopped_degenerate_keeping_its_text_and_not_retried(
    openai_server, openai_worker, make_task, alice_client, settings
):
    assert settings.REPORTS_MAX_ATTEMPTS > 1
    openai_server.queue(Reply(text=(*HEAD, *LOOP), finish_reason=None, usage=None, end="hang"))
    task = make_task()

    run_all(openai_worker)

    assert openai_server.client_closed.wait(10)  # the call was closed, not waited out
    found, attempt = ended(task, alice_client)
    assert (found["status"], found["error"]["type"]) == ("failed", "degenerate_output")
    assert found["partial"] is True
    assert len(found["attempts"]) == 1 and len(openai_server.requests) == 1  # not retried
    assert attempt.text.startswith("# A report\n\n## Summary\n\nHere is the code:")
    assert attempt.text.endswith("<pre><code>")
    assert len(attempt.text) < 3_000  # stopped long before the cap (3,000 characters here)
    assert attempt.usage_source == "estimate"
    # The page says what happened in plain words, and keeps the text.
    page = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    assert wording.FAILURES[ErrorType.DEGENERATE_OUTPUT][1] in page
    assert "kept repeating itself" in found["error"]["message"]


@pytest.mark.django_db
def test_loops_are_let_through_only_when_stopping_them_is_off(
    openai_server, openai_worker, make_task, alice_client, settings
):
    looping = Reply(text=(*HEAD, *LOOP[:200]), end="done")
    ends = {}
    for stop_loops in (True, False):
        settings.REPORTS_STOP_LOOPS = stop_loops
        openai_server.queue(looping)
        task = make_task()
        run_all(openai_worker)
        ends[stop_loops] = ended(task, alice_client)[0]["error"]["type"]
    assert ends == {True: "degenerate_output", False: "validation_failed"}  # off: it ran on


SECTION = (
    "## Chapter {n}\n\n"
    + "The encoder of chapter {n} writes tag, length and value in that order. " * 12
    + "\n\n"
)
LONG_DOCUMENT = "# The manual\n\n" + "\n\n".join(SECTION.format(n=n) for n in range(1, 60))


@pytest.mark.django_db
def test_a_plans_notes_call_held_to_its_own_cap_or_stopped_looping_keeps_its_notes(
    openai_server, openai_worker, make_task, alice_client, settings
):
    settings.REPORTS_CONTEXT_TOKENS = 4_096
    settings.REPORTS_MAX_OUTPUT_TOKENS = 1_024
    settings.REPORTS_PLAN_PARALLEL_CALLS = 1
    openai_server.faults[1] = Reply(text=endless_prose(20), finish_reason=None, usage=None)
    openai_server.faults[2] = Reply(text=LOOP, finish_reason=None, usage=None)
    capped_task = make_task(content=LONG_DOCUMENT)
    run_all(openai_worker)
    looping_task = make_task(content=LONG_DOCUMENT)
    run_all(openai_worker)

    capped_task.refresh_from_db()
    notes_cap = capped_task.plan["notes_tokens"]
    assert notes_cap < settings.REPORTS_MAX_OUTPUT_TOKENS  # its own cap, not the report's
    capped = PlanCall.objects.get(task=capped_task, key="part-1")
    assert capped.status == "succeeded"
    assert capped.output_tokens == notes_cap
    assert capped.notes  # what it wrote up to its cap are the part's notes
    # ...which the report's call then reads: the plan goes on.
    assert capped_task.status == "succeeded", capped_task.user_message
    looping_task.refresh_from_db()
    notes = PlanCall.objects.get(task=looping_task, key="part-1")
    assert notes.status == "succeeded" and notes.notes
    assert looping_task.status == "succeeded", looping_task.user_message
    assert notes.output_tokens < notes_cap / 2  # stopped well before its cap
