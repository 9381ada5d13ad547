"""An attempt that raises ends its task at once: `failed` / `worker_error`, its text kept,
its cost settled by the rule, the error logged with its traceback, its slot freed."""

from __future__ import annotations

import logging

import pytest
from django.db import DatabaseError

from reports import storage
from reports.models import Attempt, ErrorType, TaskQuerySet
from reports.providers.base import Completed, TextDelta
from reports.worker import pipeline
from tests.helpers import REPORT, run_all, stored_uploads, whole_report


def raise_on_validation(report, max_kb):
    raise RuntimeError("validator bug")


def traceback_logged(caplog) -> bool:
    return any(
        record.exc_info and "raised" in record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.ERROR
    )


@pytest.mark.django_db(transaction=True)
def test_a_missing_upload_fails_the_task_at_once_and_frees_its_slot(make_task, worker, caplog):
    task = make_task()
    storage.delete_uploads(stored_uploads())

    run_all(worker)  # returns only once every attempt it started has ended

    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", ErrorType.WORKER_ERROR)
    attempt = Attempt.objects.get(task=task)
    assert (attempt.status, attempt.error_type) == ("failed", "worker_error")
    assert (task.cost_status, task.cost_micros) == ("released", 0)  # no provider call
    assert worker.running == {}
    assert traceback_logged(caplog)
    events = list(task.events.order_by("seq").values_list("type", "data"))
    assert events[-1] == (
        "failed",
        {
            "attempt": 1,
            "error_type": "worker_error",
            "partial": False,
            "message": "An internal error stopped the report.",
        },
    )


@pytest.mark.django_db(transaction=True)
def test_an_attempt_raising_after_text_keeps_it_and_settles_its_cost(
    make_task, scripted_worker, monkeypatch, caplog
):
    monkeypatch.setattr(pipeline, "validate_report", raise_on_validation)
    task = make_task()
    worker = scripted_worker(whole_report)

    run_all(worker)

    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", ErrorType.WORKER_ERROR)
    attempt = Attempt.objects.get(task=task)
    assert attempt.text == REPORT
    assert (attempt.input_tokens, attempt.output_tokens) == (10, 20)
    assert task.cost_status == "settled"
    assert 0 < task.cost_micros == attempt.cost_micros
    assert worker.running == {}
    assert traceback_logged(caplog)


@pytest.mark.django_db(transaction=True)
def test_a_chunk_write_that_fails_ends_the_task_at_once_keeping_the_text_written(
    make_task, scripted_worker, monkeypatch, caplog
):
    append_events = TaskQuerySet.append_events
    sent = []

    def fails_on_the_third(self, appends, **kind):
        if any(draft.type == "delta" for _, _, draft in appends):
            sent.append(appends)
            if len(sent) == 3:
                raise DatabaseError("the connection dropped")
        return append_events(self, appends, **kind)

    monkeypatch.setattr(TaskQuerySet, "append_events", fails_on_the_third)

    async def endless(request, clock):
        for i in range(10_000):
            yield TextDelta(f"w{i} ")
            await clock.sleep(0.05)
        yield Completed("stop")

    task = make_task()
    run_all(scripted_worker(endless))

    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", ErrorType.WORKER_ERROR)
    written = list(task.events.filter(type="delta").values_list("data__text", flat=True))
    assert len(written) == 2  # nothing written after the write that failed
    assert len(sent) == 3  # and the stream stopped there, not at its end
    assert Attempt.objects.get(task=task).text.startswith("".join(written))
    assert traceback_logged(caplog)
