"""`manage.py reportworker` as real processes: killed mid-stream, and stopped by SIGTERM."""

import signal
from pathlib import Path

import pytest
from django.conf import settings

from reports import storage
from reports.models import Attempt, Task, TaskEvent
from tests.helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_killed_worker_task_finishes_on_another_as_a_new_attempt(make_task, spawn_worker):
    task = make_task()
    pace = {"REPORTS_SIMULATED_TTFT_S": "0", "REPORTS_SIMULATED_TOKENS_PER_S": "40"}
    workers = {w.pid: w for w in (spawn_worker(**pace), spawn_worker(**pace))}
    wait_for(
        lambda: TaskEvent.objects.filter(task=task, type="delta").count() >= 3,
        "a worker to stream some text",
    )
    holder = int(Task.objects.get(pk=task.pk).worker_id.split(":")[1])
    workers[holder].send_signal(signal.SIGKILL)  # mid-stream, no chance to clean up
    workers[holder].wait(timeout=10)
    partial = TaskEvent.objects.attempt_text(task.pk, 1)

    wait_for(
        lambda: Task.objects.filter(pk=task.pk, status="succeeded").exists(),
        "the task to succeed on the other worker",
    )
    task.refresh_from_db()
    assert int(task.worker_id.split(":")[1]) != holder
    first, second = Attempt.objects.filter(task=task).order_by("number")
    assert (first.status, first.error_type, first.text) == ("interrupted", "worker_lost", partial)
    assert second.status == "succeeded"
    saved = storage.result_path(task.result_id).read_text()
    assert saved == second.text == TaskEvent.objects.attempt_text(task.pk, 2)
    assert saved.count(partial[:40]) == 1  # the dead attempt's text is not prepended
    results = list((Path(settings.REPORTS_STORAGE_DIR) / "results").iterdir())
    assert [p.name for p in results] == [f"{task.result_id}.md"]


def test_sigterm_stops_claiming_and_lets_the_running_attempt_finish(make_task, spawn_worker):
    running = make_task()
    worker = spawn_worker(
        slots=1, REPORTS_SIMULATED_TTFT_S="0", REPORTS_SIMULATED_TOKENS_PER_S="100"
    )
    wait_for(
        lambda: TaskEvent.objects.filter(task=running, type="delta").exists(),
        "the worker to start streaming",
    )
    waiting = make_task()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0
    assert Task.objects.get(pk=running.pk).status == "succeeded"
    assert Task.objects.get(pk=waiting.pk).status == "queued"  # handed on, never half-run
