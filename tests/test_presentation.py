"""Status wording and wait estimates, from the database as it stands."""

from __future__ import annotations

import html
from datetime import timedelta

import pytest
from django.db.models import F

from reports import events, presentation, wording
from reports.events import Draft, Event
from reports.models import Status, Task
from reports.worker.leases import claim_next_task, reap_expired_leases
from tests.helpers import expire_lease, submit, task_of

pytestmark = pytest.mark.django_db


def state_after(draft: Draft, attempt: int = 0) -> events.TaskState:
    """Return the state of a task whose last event is `draft`, written in `attempt`."""
    return events.fold([Event("t", 1, draft.type, draft.stamped(attempt))])


QUEUED = state_after(events.status(Status.QUEUED))


def test_queue_position_counts_only_earlier_tasks_of_the_same_lane(alice_client):
    first = task_of(submit(alice_client))
    second = task_of(submit(alice_client))
    assert [first.queue_position(), second.queue_position()] == [1, 2]


def test_a_task_held_by_its_owners_running_reports_says_so_and_its_true_place(
    alice_client, bob_client, settings
):
    settings.REPORTS_USER_MAX_RUNNING = 1
    task_of(submit(alice_client))
    claim_next_task("w")
    waiting, after = task_of(submit(alice_client)), task_of(submit(alice_client))
    bobs = task_of(submit(bob_client))

    def detail(task) -> str:
        task = Task.objects.get(pk=task.pk)
        return presentation.status_context(task, QUEUED)["detail"]

    assert detail(waiting) == (
        "waiting for your running report to finish, as other people's reports are "
        "waiting too; 2nd in line"
    )
    assert detail(bobs) == "next in line"
    page = html.unescape(alice_client.get(f"/tasks/{waiting.pk}/").content.decode())
    assert "waiting for your running report to finish" in page

    assert claim_next_task("w").task_id == bobs.pk
    assert detail(waiting) == "next in line"  # nobody else waits: nothing holds it
    assert claim_next_task("w").task_id == waiting.pk  # alice takes a second slot
    Task.objects.filter(pk=bobs.pk).update(status=Status.SUCCEEDED, lease_expires_at=None)
    submit(bob_client)
    assert detail(after) == (
        "you have 2 reports running and other people's are waiting: theirs start first; 2nd in line"
    )


def test_no_wait_estimate_without_history():
    assert presentation.seconds_a_place("short") is None


def test_wait_estimate_is_the_lanes_median_run_time_times_position_over_slots(
    alice_client, settings
):
    settings.REPORTS_LANE_LIMITS = {"short": 2, "long": 1}
    for seconds in (10, 20, 30, 400):
        task = task_of(submit(alice_client))  # a new task: reuse is only on request
        Task.objects.filter(pk=task.pk).update(
            status=Status.SUCCEEDED,
            claimed_at=F("created_at"),
            finished_at=F("created_at") + timedelta(seconds=seconds),
        )
    # median(10, 20, 30, 400) = 25 s over 2 slots: 12.5 s a place
    assert presentation.seconds_a_place("short") == pytest.approx(12.5)
    assert presentation.seconds_a_place("long") is None


def test_queued_status_says_the_place_in_line_and_the_wait(alice_client, settings):
    settings.REPORTS_LANE_LIMITS = {"short": 1, "long": 1}
    done = task_of(submit(alice_client))
    Task.objects.filter(pk=done.pk).update(
        status=Status.SUCCEEDED,
        claimed_at=F("created_at"),
        finished_at=F("created_at") + timedelta(seconds=40),
    )
    task_of(submit(alice_client))  # a new task: reuse is only on request
    mine = task_of(submit(alice_client))
    status = presentation.status_context(mine, QUEUED)
    assert status["value"] == "queued"
    assert status["detail"] == "2nd in line, estimated wait about 80 s"


def test_a_task_claimed_while_its_page_is_read_says_it_is_starting(alice_client):
    # The page read the task while it was queued; a worker claimed it before its place
    # in line was counted. (With a finished report to estimate from, as on a busy server.)
    done = task_of(submit(alice_client))
    Task.objects.filter(pk=done.pk).update(
        status=Status.SUCCEEDED,
        claimed_at=F("created_at"),
        finished_at=F("created_at") + timedelta(seconds=40),
    )
    read_queued = task_of(submit(alice_client))
    Task.objects.filter(pk=read_queued.pk).update(status=Status.RUNNING)
    status = presentation.status_context(read_queued, QUEUED)
    assert status["detail"] == "starting now"


def test_a_retry_says_which_attempt_comes_and_why_it_waits(alice_client):
    task = task_of(submit(alice_client))
    retry = state_after(events.requeued(retry_after_s=2, reason="rate_limited"), attempt=1)
    detail = presentation.status_context(task, retry)["detail"]
    assert detail.startswith("trying again: the provider asked us to wait 2 s")


def test_a_requeued_lost_attempt_says_it_starts_again(alice_client):
    task = task_of(submit(alice_client))
    detail = presentation.status_context(task, state_after(events.requeued(), 1))["detail"]
    assert detail.startswith("starting again: the last try was interrupted")


def test_a_restart_says_the_report_is_written_again_and_the_time_since_submit_goes_on(
    alice_client, settings
):
    settings.REPORTS_EMBEDDED_WORKER = True  # the demo's layout: the server is the worker
    task = task_of(submit(alice_client))
    Task.objects.filter(pk=task.pk).update(created_at=F("created_at") - timedelta(seconds=100))
    claim = claim_next_task("w")
    Task.objects.append_event(claim.task_id, claim.epoch, events.delta("Some text"))
    expire_lease(task)
    reap_expired_leases()
    restarted = "the server restarted; the report is being written again from the start"
    for value in ("queued", "running"):
        task.refresh_from_db()
        status = presentation.status_context(task, presentation.task_state(task))
        assert status["value"] == value
        assert restarted in status["detail"]
        assert status["elapsed_ms"] >= 100_000  # counted from the submit, not the restart
        claim_next_task("w")


def test_waiting_for_the_first_text_says_since_when_and_when_it_gives_up(alice_client, settings):
    settings.REPORTS_PROVIDER_RESPONSE_TIMEOUT_S = 60
    settings.REPORTS_STALL_TIMEOUT_S = 30
    task = task_of(submit(alice_client))
    claim_next_task("w")
    page = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    waiting = page[page.index("<span data-waiting>") :]
    waiting = waiting[: waiting.index("</span>")]
    assert 'data-local-time="clock"' in waiting  # the attempt's start, to the second
    assert "a real model may read for minutes" in waiting
    assert "does not answer within 60 s, or answers and then writes nothing for 30 s" in waiting


@pytest.mark.parametrize(
    ("end", "words"),
    [
        (events.failed("provider_error", "", partial=True), "dropped the connection"),
        (events.failed("stream_truncated", "", partial=True), "ended early"),
        (events.failed("empty_output", "", partial=False), "without writing any text"),
        (events.failed("stalled", "", partial=False), "stalled"),
        (events.failed("timeout", "", partial=True), "timed out"),
        (events.failed("validation_failed", "", partial=True), "shape of a report"),
        (events.cancelled(partial=True), "Cancelled by you."),
        (events.reconciliation_required("", partial=True), "Outcome unknown — needs an admin"),
    ],
)
def test_why_a_task_is_incomplete_in_plain_words(end, words):
    state = state_after(end, attempt=1)
    said = presentation.incomplete_context(state)
    assert words in said.reason
    expected = "incomplete" if state.partial else "No text arrived."
    if state.error_type == "validation_failed":
        expected = "arrived whole"  # the text is all there: it failed the checks
    assert expected in said.partial


def test_nothing_is_incomplete_about_success_or_work_in_progress():
    ends = [events.succeeded("r"), *(events.status(s) for s in ("queued", "running", "finalizing"))]
    for end in ends:
        assert presentation.incomplete_context(state_after(end, attempt=1)) is None


def test_every_error_type_has_plain_words():
    from reports.models import ErrorType

    assert set(ErrorType.values) <= set(wording.FAILURES)


def test_the_status_line_of_a_resumed_page_is_the_last_status_not_a_later_progress(alice_client):
    task = task_of(submit(alice_client))
    claim = claim_next_task("w")  # seq 1: running
    Task.objects.append_event(claim.task_id, claim.epoch, events.delta("Some text"))
    Task.objects.append_event(claim.task_id, claim.epoch, events.progress(1, 3, "part 1"))
    task.refresh_from_db()
    state = presentation.status_at(task, task.last_seq)
    assert (state.status, state.status_attempt, state.seq) == ("running", 1, 3)
    whole = presentation.task_state(task)
    assert (whole.text, whole.progress) == ("Some text", events.Progress(1, 3, "part 1"))


@pytest.mark.parametrize(
    ("done", "said"),
    [
        (0, "It stopped before notes on any part were written: the report was not written."),
        (2, "It stopped with notes on 2 of the 3 parts: the other parts were not read"),
        (3, "Every part was read; it stopped while writing the report from the notes."),
    ],
)
def test_a_plan_that_stopped_says_how_far_it_came(make_task, done, said):
    task = make_task()
    task.plan = {"parts": 3, "rounds": 0, "calls": 4}
    drafts = [events.progress(done, 4, "Reading part 3 of 3"), events.cancelled(partial=False)]
    state = events.fold([Event("t", n, d.type, d.stamped(1)) for n, d in enumerate(drafts, 1)])
    notice = presentation.plan_notice(task, state)
    assert notice.startswith("Planned in 3 parts: ") and said in notice
    assert "0 of the 3" not in notice and "Every passage" not in notice
