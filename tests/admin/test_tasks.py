"""Django admin: the task list, the read-only task page, the staff download and the actions."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils.html import escape

from reports.models import Status, Task, TaskEvent
from reports.reconciliation import FAILED_MESSAGE, ResolutionRefused, resolve_reconciliation
from reports.worker.leases import claim_next_task
from tests.helpers import run_all, saved_report

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/reports/task/"


def change_url(task: Task) -> str:
    return f"{CHANGELIST}{task.pk}/change/"


def listed(response) -> set:
    return {task.pk for task in response.context["cl"].result_list}


def run_action(client, action: str, *tasks: Task):
    return client.post(
        CHANGELIST,
        {"action": action, "_selected_action": [str(t.pk) for t in tasks]},
        follow=True,
    )


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def seqs(task: Task) -> list[int]:
    return list(TaskEvent.objects.filter(task=task).order_by("seq").values_list("seq", flat=True))


def in_reconciliation(make_task) -> Task:
    """A task whose provider outcome is unknown: claimed, then moved to reconciliation."""
    task = make_task()
    claim = claim_next_task("worker-a")
    assert claim.task_id == task.pk
    event = Task.objects.transition(
        task.pk, Status.RUNNING, Status.RECONCILIATION_REQUIRED, expect_epoch=claim.epoch
    )
    assert event is not None
    task.refresh_from_db()
    return task


def test_changelist_lists_tasks_and_filters_by_status(admin_client, make_task, worker):
    ok, broken = make_task(), make_task(scenario="error")
    run_all(worker)
    queued = make_task()

    everything = admin_client.get(CHANGELIST)
    assert everything.status_code == 200
    assert listed(everything) == {ok.pk, broken.pk, queued.pk}

    failed = admin_client.get(CHANGELIST, {"status__exact": "failed"})
    assert listed(failed) == {broken.pk}
    by_error = admin_client.get(CHANGELIST, {"error_type": "provider_error"})
    assert listed(by_error) == {broken.pk}
    assert b"provider_error" in everything.content  # offered as an error-type filter


def test_search_by_full_task_id_or_owner(admin_client, make_task, bob):
    wanted, other = make_task(), make_task()
    bobs = make_task(owner=bob)

    assert listed(admin_client.get(CHANGELIST, {"q": str(wanted.pk)})) == {wanted.pk}
    assert listed(admin_client.get(CHANGELIST, {"q": "bob"})) == {bobs.pk}
    assert other.pk not in listed(admin_client.get(CHANGELIST, {"q": str(wanted.pk)}))


def test_change_view_shows_attempts_events_and_timings(admin_client, make_task, worker):
    task = make_task()
    run_all(worker)
    task.refresh_from_db()
    assert task.status == Status.SUCCEEDED

    response = admin_client.get(change_url(task))
    assert response.status_code == 200
    page = response.content.decode()
    assert "doc.md" in page  # the document
    assert "Stage durations" in page and "generate " in page  # the attempt
    assert "events in all" in page and "succeeded" in page
    assert "queue (submit → first claim)" in page  # the timings block
    assert 'name="_save"' not in page  # read-only
    assert task.result_sha256 in page
    assert f"/admin/reports/task/{task.pk}/report/" in page


def test_staff_download_serves_the_saved_report_as_attachment(admin_client, make_task, worker):
    task = make_task()
    run_all(worker)
    task.refresh_from_db()

    response = admin_client.get(f"{CHANGELIST}{task.pk}/report/")
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment")
    saved = saved_report(task).encode()
    assert response.content == saved


def test_download_of_an_unfinished_task_is_404(admin_client, make_task):
    task = make_task()
    assert admin_client.get(f"{CHANGELIST}{task.pk}/report/").status_code == 404


def test_text_events_are_one_row_and_every_event_is_a_click_away(admin_client, make_task):
    task = make_task()
    first = task.last_seq + 1
    TaskEvent.objects.bulk_create(
        TaskEvent(task=task, seq=seq, type="delta", data={"text": f"piece-{seq}-", "attempt": 1})
        for seq in range(first, 301)
    )
    Task.objects.filter(pk=task.pk).update(last_seq=300)
    chars = sum(len(f"piece-{seq}-") for seq in range(first, 301))

    page = admin_client.get(change_url(task)).content.decode()
    assert "piece-" not in page
    assert f"attempt 1: {300 - first + 1} events, {chars:,} characters" in page
    moment = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
    assert re.search(f"first {moment}, last {moment}", page)
    # One way to write a moment, to the second, on the whole page.
    assert not re.search(r"\b[ap]\.m\.|midnight|noon", page)
    assert 'href="?events=all"' in page

    page = admin_client.get(change_url(task), {"events": "all"}).content.decode()
    assert "piece-300-" in page and "piece-101-" in page
    assert "piece-100-" not in page
    assert "300 events in all, text included, only the latest 200 (seq 101 to 300)" in page


def test_non_staff_are_sent_to_the_admin_login(alice_client, make_task):
    task = make_task()
    for url in (CHANGELIST, change_url(task), f"{CHANGELIST}{task.pk}/report/"):
        response = alice_client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")


def test_nothing_can_be_added_or_edited(admin_client, make_task):
    task = make_task()
    assert admin_client.get(f"{CHANGELIST}add/").status_code == 403
    admin_client.post(change_url(task), {"status": "succeeded"})
    task.refresh_from_db()
    assert task.status == Status.QUEUED


def test_cancel_action_cancels_a_queued_task(admin_client, make_task):
    task = make_task()
    response = run_action(admin_client, "cancel_tasks", task)
    task.refresh_from_db()
    assert task.status == Status.CANCELLED
    assert "1 cancelled, 0 asked to stop (running), 0 already finished." in messages_of(response)


def test_cancel_action_asks_a_running_task_and_leaves_finished_ones(
    admin_client, make_task, worker
):
    done = make_task()
    run_all(worker)
    running = make_task()
    claim_next_task("worker-a")

    response = run_action(admin_client, "cancel_tasks", done, running)
    done.refresh_from_db()
    running.refresh_from_db()
    assert done.status == Status.SUCCEEDED
    assert running.cancel_requested_at is not None
    assert "0 cancelled, 1 asked to stop (running), 1 already finished." in messages_of(response)


def test_cancel_action_names_a_task_in_reconciliation_as_waiting_not_finished(
    admin_client, make_task
):
    task = in_reconciliation(make_task)
    queued = make_task()

    response = run_action(admin_client, "cancel_tasks", task, queued)
    task.refresh_from_db()
    assert task.status == Status.RECONCILIATION_REQUIRED
    assert messages_of(response) == [
        "1 cancelled, 0 asked to stop (running), 0 already finished. 1 in "
        "reconciliation_required, not cancelled: requeue them or mark them failed."
    ]


def test_cancel_action_counts_ended_tasks_without_visiting_each(admin_client, make_task, alice):
    # Selecting every page selects thousands of ended tasks: a read each outlasted a
    # proxy's timeout. The work must not grow with them.
    def cancel_with_ended(count: int) -> tuple[int, list[str]]:
        ended = [Task.objects.create(owner=alice, content_sha256="0" * 64) for _ in range(count)]
        Task.objects.filter(pk__in=[task.pk for task in ended]).update(status=Status.SUCCEEDED)
        selected = [str(task.pk) for task in (make_task(), *ended)]
        with CaptureQueriesContext(connection) as seen:  # the action, not the page after it
            admin_client.post(CHANGELIST, {"action": "cancel_tasks", "_selected_action": selected})
        return len(seen), messages_of(admin_client.get(CHANGELIST))

    few, said = cancel_with_ended(3)
    assert said == ["1 cancelled, 0 asked to stop (running), 3 already finished."]
    many, said = cancel_with_ended(60)
    assert said == ["1 cancelled, 0 asked to stop (running), 60 already finished."]
    assert many == few


def test_requeue_makes_a_reconciliation_task_claimable_again(admin_client, make_task):
    task = in_reconciliation(make_task)

    response = run_action(admin_client, "requeue_reconciled", task)
    task.refresh_from_db()
    assert task.status == Status.QUEUED
    assert task.error_type == "" and task.finished_at is None
    assert "1 task(s) requeued." in messages_of(response)
    last = TaskEvent.objects.filter(task=task).order_by("-seq").first()
    assert last.type == "status"
    assert last.data["status"] == "queued" and last.data["resolved_by"] == "admin"
    assert seqs(task) == list(range(1, task.last_seq + 1))

    claim = claim_next_task("worker-b")
    assert claim is not None and claim.task_id == task.pk and claim.number == 2
    assert seqs(task) == list(range(1, Task.objects.get(pk=task.pk).last_seq + 1))


def test_mark_failed_resolves_a_reconciliation_task(admin_client, make_task):
    task = in_reconciliation(make_task)

    response = run_action(admin_client, "fail_reconciled", task)
    task.refresh_from_db()
    assert task.status == Status.FAILED
    assert task.error_type == "provider_error"
    assert task.user_message == FAILED_MESSAGE
    assert task.finished_at is not None
    assert "1 task(s) marked failed." in messages_of(response)
    last = TaskEvent.objects.filter(task=task).order_by("-seq").first()
    assert last.type == "failed"
    assert last.data["error_type"] == "provider_error" and last.data["partial"] is False
    assert seqs(task) == list(range(1, task.last_seq + 1))


@pytest.mark.parametrize("action", ["requeue_reconciled", "fail_reconciled"])
def test_resolve_actions_skip_tasks_in_other_states(admin_client, make_task, worker, action):
    done = make_task()
    run_all(worker)
    stuck = in_reconciliation(make_task)
    events_before = seqs(done)

    response = run_action(admin_client, action, done, stuck)
    done.refresh_from_db()
    stuck.refresh_from_db()
    assert done.status == Status.SUCCEEDED
    assert seqs(done) == events_before
    assert stuck.status != Status.RECONCILIATION_REQUIRED
    assert any(
        m.startswith("Skipped 1 task(s) not in reconciliation_required") and str(done.pk) in m
        for m in messages_of(response)
    )


def test_requeue_is_refused_once_attempts_are_used_up(admin_client, make_task, settings):
    settings.REPORTS_MAX_ATTEMPTS = 1
    task = in_reconciliation(make_task)

    response = run_action(admin_client, "requeue_reconciled", task)
    task.refresh_from_db()
    assert task.status == Status.RECONCILIATION_REQUIRED
    assert any("REPORTS_MAX_ATTEMPTS=1" in m for m in messages_of(response))


def test_reconciliation_cannot_be_resolved_as_succeeded(make_task, admin_user):
    task = in_reconciliation(make_task)
    with pytest.raises(ResolutionRefused):
        resolve_reconciliation(task.pk, Status.SUCCEEDED, by_user=admin_user)
    task.refresh_from_db()
    assert task.status == Status.RECONCILIATION_REQUIRED


def test_a_task_is_resolved_once(make_task, admin_user):
    task = in_reconciliation(make_task)
    assert resolve_reconciliation(task.pk, Status.FAILED, by_user=admin_user) is not None
    assert resolve_reconciliation(task.pk, Status.QUEUED, by_user=admin_user) is None
    assert Task.objects.get(pk=task.pk).status == Status.FAILED


def test_attempt_and_token_lists_load(admin_client, make_task, worker, alice_token):
    make_task()
    run_all(worker)
    attempts = admin_client.get("/admin/reports/attempt/")
    assert attempts.status_code == 200 and len(attempts.context["cl"].result_list) == 1
    tokens = admin_client.get("/admin/reports/apitoken/")
    assert tokens.status_code == 200 and b"alice" in tokens.content
    assert admin_client.get("/admin/reports/apitoken/add/").status_code == 403


def test_changelist_queries_do_not_grow_with_the_tasks(admin_client, make_task, bob):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(CHANGELIST).status_code == 200
        return len(captured)

    make_task()
    few = queries()
    for owner in (None, bob, None, bob, None):
        make_task(owner=owner)
    assert queries() == few


def test_attempt_page_shows_the_whole_text(admin_client, make_task, worker):
    task = make_task()
    run_all(worker)
    attempt = task.attempts.get()
    page = admin_client.get(f"/admin/reports/attempt/{attempt.pk}/change/")
    assert page.status_code == 200
    assert escape(attempt.text.splitlines()[-1]) in page.content.decode()
