"""A plan of calls, black box: a document several times the model's window is read whole,
in parts whose notes are durable steps, with its progress and its money."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import threading
import time

import lxml.html
import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.template.loader import render_to_string

from reports import events, presentation
from reports.clock import Clock, FakeClock
from reports.models import Attempt, PlanCall, Task, TaskEvent
from reports.parsers.planning import FINAL, PART, Plan, Step
from reports.providers.base import Usage
from reports.streaming.follower import events_after
from reports.worker.leases import LeaseLost, claim_next_task, reap_expired_leases
from reports.worker.plan_store import CallEnd, save_call_end
from reports.worker.prepared import store_made
from reports.worker.supervisor import Supervisor
from tests.helpers import make_submission, run_all, saved_report
from tests.providers.openai_server import OpenAIServer, Reply, error, point_at

pytestmark = pytest.mark.django_db(transaction=True)

SECTION = (
    "## Chapter {n}, Encoding {n}\n\n"
    + "The encoder of chapter {n} writes tag, length and value in that order. " * 12
    + "\n\n"
    + "Each value of chapter {n} is checked against its type before it is written. " * 12
)
DOCUMENT = "# The manual\n\n" + "\n\n".join(SECTION.format(n=n) for n in range(1, 40))


@pytest.fixture
def server(settings):
    server = OpenAIServer().start()
    point_at(settings, server.base_url, read_timeout_s=30)
    settings.REPORTS_CONTEXT_TOKENS = 4_096
    settings.REPORTS_MAX_OUTPUT_TOKENS = 1_024
    settings.REPORTS_PLAN_PARALLEL_CALLS = 2
    yield server
    server.stop()


@pytest.fixture
def worker(server) -> Supervisor:
    return Supervisor(slots=4, clock=Clock())


def notes_requests(server) -> list[str]:
    return [
        r.body["messages"][1]["content"]
        for r in server.requests
        if r.body["messages"][0]["content"].startswith("You are Reportline's reader")
    ]


def sent_ids(server) -> list[str]:
    """The passage ids the parts' requests sent, in the order of the parts (they run side
    by side, so they may arrive in any order)."""
    parts = [re.findall(r"^\[(S\d+)\] \(", user, re.M) for user in notes_requests(server)]
    return [sid for ids in sorted(parts, key=lambda ids: int(ids[0][1:])) for sid in ids]


def test_a_document_several_times_the_window_is_read_whole(alice, server, worker):
    assert len(DOCUMENT) > 5 * (4_096 - 1_024) * 3
    task = make_submission(alice, DOCUMENT)
    run_all(worker)
    task = Task.objects.get(pk=task.pk)
    assert task.status == "succeeded", task.user_message
    passages = task.plan["steps"]
    parts = [step for step in passages if step[1] == "part"]
    assert len(parts) >= 5 and task.plan["calls"] == len(server.requests)
    # Every passage reached the model exactly once, in order, across the parts.
    last = max(step[4] for step in parts)
    assert sent_ids(server) == [f"S{n}" for n in range(1, last + 1)]
    # The report was written from the notes, which cite the passages.
    final = server.requests[-1].body["messages"]
    assert final[0]["content"].startswith("You are Reportline's report writer")
    assert "[S1]" in final[1]["content"] and f"[S{last}]" in final[1]["content"]
    assert set(PlanCall.objects.filter(task=task).values_list("status", flat=True)) == {"succeeded"}
    # Money: the task's cost is the sum of every call's (parts, rounds, final call).
    calls = PlanCall.objects.filter(task=task)
    attempt = Attempt.objects.get(task=task)
    usage = sum(c.input_tokens for c in calls) + 120  # the final call's prompt tokens
    assert attempt.input_tokens == usage
    assert task.cost_micros == attempt.cost_micros > sum(c.cost_micros for c in calls) > 0


def test_progress_is_persisted_in_order_and_never_goes_back(alice, server, worker):
    task = make_submission(alice, DOCUMENT)
    run_all(worker)
    task = Task.objects.get(pk=task.pk)
    # A client arriving after the end is replayed every progress event, in order.
    replayed, ended = events_after(task.pk, 0)
    assert ended
    state, progress = None, []
    for event in replayed:
        state = events.fold([event], state)
        if event.type == events.PROGRESS:
            progress.append((state.progress.done, state.progress.total, state.progress.label))
    total = task.plan["calls"]
    assert {p[1] for p in progress} == {total}
    dones = [p[0] for p in progress]
    assert dones == sorted(dones) and dones[-1] == total - 1
    assert progress[0][2].startswith(f"Reading part 1 of {task.plan['parts']}: ")
    assert "Chapter 1, Encoding 1" in progress[0][2]
    assert progress[-1][2] == "Writing the report from the notes"
    # Each notes call's start and end, the final's; and, when the rate the parts taught
    # says the model will read the notes for 2 s or more, the final's reading as it starts.
    readings = sum(1 for event in replayed if "reading" in event.data)
    assert readings <= 1 and len(progress) - readings == 2 * (total - 1) + 1


def test_a_retry_mid_plan_sends_no_finished_part_again(alice, server, worker, settings):
    settings.REPORTS_PLAN_PARALLEL_CALLS = 1
    server.faults[3] = error(503, "busy", **{"retry-after": "1"})
    task = make_submission(alice, DOCUMENT)
    run_all(worker)
    assert Task.objects.get(pk=task.pk).status == "queued"
    done = list(
        PlanCall.objects.filter(task=task, status="succeeded").values_list("key", flat=True)
    )
    assert done == ["part-1", "part-2"]
    before = len(server.requests)
    Task.objects.filter(pk=task.pk).update(not_before=None)  # the wait is over
    run_all(worker)
    task = Task.objects.get(pk=task.pk)
    assert task.status == "succeeded", task.user_message
    again = server.requests[before:]
    assert len(again) == task.plan["calls"] - 2  # neither finished part was sent again
    ids = sent_ids(server)
    assert len(ids) == len(set(ids)) + len(re.findall(r"^\[S", notes_requests(server)[2], re.M))
    first, second = Attempt.objects.filter(task=task).order_by("number")
    assert first.status == "retry_scheduled" and first.cost_micros > 0  # two parts ran
    assert task.cost_micros == first.cost_micros + second.cost_micros


def test_a_document_over_the_calls_allowed_is_refused_before_any_call(
    alice, server, worker, settings
):
    settings.REPORTS_MAX_PARTS = 3
    task = make_submission(alice, DOCUMENT)
    run_all(worker)
    task = Task.objects.get(pk=task.pk)
    assert (task.status, task.error_type) == ("failed", "invalid_input")
    assert "at most 3" in task.user_message and "characters" in task.user_message
    assert server.requests == []
    assert task.cost_status == "released"


def test_a_part_without_notes_fails_empty_output_and_keeps_the_other_notes(
    alice, server, worker, settings
):
    settings.REPORTS_PLAN_PARALLEL_CALLS = 1
    server.faults[2] = Reply(text=())
    task = make_submission(alice, DOCUMENT)
    run_all(worker)
    task = Task.objects.get(pk=task.pk)
    assert (task.status, task.error_type) == ("failed", "empty_output")
    calls = dict(PlanCall.objects.filter(task=task).values_list("key", "status"))
    assert calls["part-1"] == "succeeded" and calls["part-2"] == "failed"
    assert "[S1]" in PlanCall.objects.get(task=task, key="part-1").notes
    assert len(server.requests) == 2
    text = Attempt.objects.get(task=task).text
    assert text.startswith("Notes on the parts read so far") and "[S1]" in text


def test_a_report_read_in_parts_is_titled_as_a_report_read_whole(alice, settings):
    # The simulated model, on a fake clock: its report from notes sees neither the
    # documents nor their passages, only the title the plan gives it.
    settings.REPORTS_CONTEXT_TOKENS = 4_096
    settings.REPORTS_MAX_OUTPUT_TOKENS = 1_024
    task = make_submission(alice, DOCUMENT)
    run_all(Supervisor(slots=2, clock=FakeClock()))
    task.refresh_from_db()
    assert task.status == "succeeded" and task.plan["parts"] > 1
    assert saved_report(task).startswith("# The manual\n")


def test_a_document_that_fits_is_one_call_showing_passage_ids(alice, server, worker, settings):
    settings.REPORTS_CONTEXT_TOKENS = 128_000
    task = make_submission(alice, DOCUMENT)
    run_all(worker)
    task = Task.objects.get(pk=task.pk)
    assert task.status == "succeeded" and task.plan["calls"] == 1
    (request,) = server.requests
    assert "[S1] (" in request.body["messages"][1]["content"]
    assert not TaskEvent.objects.filter(task=task, type=events.PROGRESS).exists()


@pytest.mark.parametrize(("slots", "width"), [(1, 1), (3, 3), (8, 4)])
def test_a_plan_runs_its_parts_side_by_side_only_in_idle_slots(
    alice, server, settings, monkeypatch, slots, width
):
    settings.REPORTS_PLAN_PARALLEL_CALLS = 4
    worker = Supervisor(slots=slots, clock=Clock())
    widths = []
    lend = worker.spare.borrow

    def borrow(wanted: int) -> int:
        lent = lend(wanted)
        widths.append(1 + lent)
        assert len(worker.running) + worker.spare.lent <= slots
        return lent

    monkeypatch.setattr(worker.spare, "borrow", borrow)
    task = make_submission(alice, DOCUMENT)
    run_all(worker)
    assert Task.objects.get(pk=task.pk).status == "succeeded"
    assert widths[0] == width and worker.spare.lent == 0


def test_the_status_line_shows_which_part_is_being_read(alice):
    task = make_submission(alice, DOCUMENT)
    state = events.TaskState(
        status="running", progress=events.Progress(2, 12, "Reading part 3 of 11: Chapter 4")
    )
    status = presentation.status_context(task, state)
    html = render_to_string("reports/task.html#status", {"status": status})
    assert '<span data-progress data-done="2" data-total="12">' in html
    assert "Reading part 3 of 11: Chapter 4 (2 of 12 calls done)</span>" in html


async def hanging_at_part_3(alice, server, settings) -> tuple[Task, Supervisor]:
    """Start a plan whose third call hangs after half a note, once parts 1 and 2 wrote
    theirs: its task and the worker running it."""
    settings.REPORTS_PLAN_PARALLEL_CALLS = 1
    server.faults[3] = Reply(text=("- half a note",), finish_reason=None, usage=None, end="hang")
    task = await sync_to_async(make_submission)(alice, DOCUMENT)
    worker = Supervisor(slots=2, clock=Clock())
    assert await worker.claim_and_start()
    assert await asyncio.to_thread(server.hanging.wait, 10)  # parts 1 and 2 wrote notes
    return task, worker


async def test_a_cancel_mid_plan_keeps_the_notes_so_far(alice, alice_client, server, settings):
    task, worker = await hanging_at_part_3(alice, server, settings)
    cancel = await sync_to_async(alice_client.post)(f"/api/tasks/{task.pk}/cancel")
    assert cancel.status_code == 202
    await worker.wait_for_attempts()
    task = await Task.objects.aget(pk=task.pk)
    assert task.status == "cancelled"
    attempt = await Attempt.objects.aget(task=task)
    assert attempt.text.startswith("Notes on the parts read so far")
    assert "[S1]" in attempt.text and "half a note" not in attempt.text
    kept = [
        key
        async for key in PlanCall.objects.filter(task=task, status="succeeded").values_list(
            "key", flat=True
        )
    ]
    assert kept == ["part-1", "part-2"]
    assert server.client_closed.wait(5)  # the hanging call was closed


def status_detail(task_id) -> str:
    task = Task.objects.get(pk=task_id)
    return presentation.status_context(task, presentation.task_state(task))["detail"]


def notice_and_notes(client, task) -> tuple[str, str]:
    """Return the task page's plan notice and the notes it shows, as a reader reads them."""
    page = lxml.html.fromstring(client.get(f"/tasks/{task.pk}/").content)
    notes = page.xpath("//*[@data-plan-notes-text]")
    notice = page.xpath("//*[@data-plan-notice]")[0].text_content()
    return notice, notes[0].text_content() if notes else ""


async def test_a_plan_cancelled_mid_way_shows_how_far_it_came_and_the_notes_it_wrote(
    alice, alice_client, server, settings
):
    task, worker = await hanging_at_part_3(alice, server, settings)
    task = await Task.objects.aget(pk=task.pk)
    parts = task.plan["parts"]
    notice, notes = await sync_to_async(notice_and_notes)(alice_client, task)
    # While it reads, the page says what it does, not what it did.
    assert f"Read in {parts} parts" in notice and "Every passage is read." in notice
    assert "was read" not in notice and notes == ""
    await sync_to_async(alice_client.post)(f"/api/tasks/{task.pk}/cancel")
    await worker.wait_for_attempts()

    notice, notes = await sync_to_async(notice_and_notes)(alice_client, task)
    assert "Every passage" not in notice
    assert f"It stopped with notes on 2 of the {parts} parts" in notice
    assert "the report was not written" in notice
    # The notes it wrote are the text that arrived, on the page for the reader to keep.
    attempt = await Attempt.objects.aget(task=task)
    assert notes == attempt.text and "[S1]" in notes
    page = (await sync_to_async(alice_client.get)(f"/tasks/{task.pk}/")).content.decode()
    assert "below are the notes on the parts it read" in page
    assert 'data-action="download-partial"' in page


async def test_a_lost_worker_mid_plan_leaves_its_finished_parts_to_the_next(
    alice, server, settings
):
    settings.REPORTS_PLAN_PARALLEL_CALLS = 1
    server.faults[3] = Reply(text=("- half a note",), finish_reason=None, usage=None, end="hang")
    task = await sync_to_async(make_submission)(alice, DOCUMENT)
    lost = Supervisor(slots=1, clock=Clock())
    assert await lost.claim_and_start()
    assert await asyncio.to_thread(server.hanging.wait, 10)  # parts 1 and 2 wrote notes
    for running in list(lost.running.values()):  # the worker dies: nothing more is written
        running.cancel()
    await asyncio.gather(*lost.running.values(), return_exceptions=True)
    expired = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    await Task.objects.filter(pk=task.pk).aupdate(lease_expires_at=expired)
    await sync_to_async(reap_expired_leases)()
    assert (await Task.objects.aget(pk=task.pk)).status == "queued"  # to run again
    # The page says what a restart keeps: not "written again from the start".
    detail = await sync_to_async(status_detail)(task.pk)
    assert "the notes on the parts already read are kept" in detail
    assert "from the start" not in detail
    sent = len(server.requests)
    await sync_to_async(run_all)(Supervisor(slots=2, clock=Clock()))
    task = await Task.objects.aget(pk=task.pk)
    assert task.status == "succeeded", task.user_message
    # The next attempt called the provider only for the parts without notes, and the final.
    assert len(server.requests) - sent == task.plan["calls"] - 2
    second = notes_requests(server)[3]
    assert re.search(r"^\[S1\] \(", second, re.M) is None


def test_a_worker_that_lost_its_task_stores_neither_plan_nor_notes(alice):
    # Its lease expired and another worker holds the task: what it still writes would mix
    # two attempts' plans, so both writes are fenced by the epoch it claimed at.
    task = make_submission(alice, DOCUMENT)
    stale = claim_next_task("worker-a")
    Task.objects.filter(pk=task.pk).update(lease_expires_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    reap_expired_leases()
    current = claim_next_task("worker-b")
    part = Step("part-1", PART, "passage 1", 1, 1)
    plan = Plan((part, Step("final", FINAL, "the notes", reads=("part-1",))), 100, 200)
    with pytest.raises(LeaseLost):
        store_made(stale, [], plan=plan)
    assert Task.objects.get(pk=task.pk).plan is None
    store_made(current, [], plan=plan)
    end = CallEnd("part-1", True, "- a stale note", "", Usage(), 0, 1.0, None)
    assert not save_call_end(task.pk, stale.epoch, stale.number, end)
    assert PlanCall.objects.get(task_id=task.pk, key="part-1").notes == ""
    assert save_call_end(task.pk, current.epoch, current.number, end)
    assert PlanCall.objects.get(task_id=task.pk, key="part-1").notes == "- a stale note"


def test_the_reservation_covers_the_whole_plan_before_the_first_call(alice, server, settings):
    settings.REPORTS_DEFAULT_BUDGET_MICROS = 20_000  # enough for one call, not for the plan
    task = make_submission(alice, DOCUMENT)
    run_all(Supervisor(slots=2, clock=Clock()))
    task = Task.objects.get(pk=task.pk)
    assert (task.status, task.error_type) == ("failed", "budget_exhausted")
    assert server.requests == [] and task.cost_status == "released"


def test_notes_that_do_not_fit_one_call_are_combined_in_rounds(alice, server):
    document = "# The long manual\n\n" + "\n\n".join(SECTION.format(n=n) for n in range(1, 121))
    task = make_submission(alice, document)
    run_all(Supervisor(slots=4, clock=Clock()))
    task = Task.objects.get(pk=task.pk)
    assert task.status == "succeeded", task.user_message
    assert task.plan["rounds"] >= 2 and task.plan["calls"] == len(server.requests)
    editors = [
        r
        for r in server.requests
        if r.body["messages"][0]["content"].startswith("You are Reportline's editor")
    ]
    assert len(editors) == task.plan["rounds"]
    final = server.requests[-1].body["messages"][1]["content"]
    last = max(step[4] for step in task.plan["steps"] if step[1] == "part")
    assert "[S1]" in final and f"[S{last}]" in final  # the citations survived the rounds


@pytest.mark.parametrize("first_to_end", [1, 2])
def test_the_status_line_names_every_part_read_side_by_side_and_none_that_ended(
    alice, server, worker, first_to_end
):
    # Parts 1 and 2 are read side by side, both held at the model; one is let go, then,
    # once its notes are saved and part 3 is under way, the other; part 3 is let go once
    # part 4 is under way too.
    holds = {n: threading.Event() for n in (1, 2, 3)}  # by the order the requests came
    server.faults.update({n: Reply(cite=True, hold=hold) for n, hold in holds.items()})
    task = make_submission(alice, DOCUMENT)

    def done() -> int:
        rows = TaskEvent.objects.filter(task=task, type=events.PROGRESS)
        return max((row.data["done"] for row in rows), default=0)

    def until(condition) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not condition():
            time.sleep(0.02)

    def release() -> None:
        try:
            until(lambda: len(server.requests) >= 2)
            came_first = "[S1] (" in notes_requests(server)[0]
            part = {1: holds[1 if came_first else 2], 2: holds[2 if came_first else 1]}
            part[first_to_end].set()
            until(lambda: done() >= 1 and len(server.requests) >= 3)
            part[3 - first_to_end].set()
            until(lambda: done() >= 2 and len(server.requests) >= 4)
        finally:
            for hold in holds.values():
                hold.set()
            connections.close_all()

    releaser = threading.Thread(target=release)
    releaser.start()
    run_all(worker)
    releaser.join()
    task = Task.objects.get(pk=task.pk)
    assert task.status == "succeeded", task.user_message
    of = task.plan["parts"]
    read = {n: task.plan["steps"][n - 1][2] for n in (1, 2, 3, 4)}  # what each part reads
    assert "; " not in "".join(read.values()) and len(" ".join(read.values())) < 200
    replayed, _ = events_after(task.pk, 0)
    state, labels = None, []
    for event in replayed:
        state = events.fold([event], state)
        if event.type == events.PROGRESS:
            labels.append((state.progress.done, state.progress.label))
    still = 3 - first_to_end
    assert labels[:6] == [
        (0, f"Reading part 1 of {of}: {read[1]}"),
        (0, f"Reading parts 1 and 2 of {of}: {read[1]}; {read[2]}"),
        (1, f"Reading part {still} of {of}: {read[still]}"),  # the one that ended is gone
        (1, f"Reading parts {still} and 3 of {of}: {read[still]}; {read[3]}"),
        (2, f"Reading part 3 of {of}: {read[3]}"),
        (2, f"Reading parts 3 and 4 of {of}: {read[3]}; {read[4]}"),
    ]
    assert labels[-1] == (task.plan["calls"] - 1, "Writing the report from the notes")
