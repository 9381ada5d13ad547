"""The status line while the model reads the report's prompt: how far, in words, the time
left (which the page counts down), and never "writing" before the first text."""

from __future__ import annotations

import pytest
from django.template.loader import render_to_string

from reports import events, presentation
from reports.models import Task
from tests.helpers import make_submission

pytestmark = pytest.mark.django_db


def status_line(task: Task, progress: events.Progress) -> str:
    state = events.TaskState(status="running", progress=progress)
    status = presentation.status_context(task, state)
    return render_to_string("reports/task.html#status", {"status": status})


def test_the_servers_count_and_the_time_left(alice):
    reading = events.Reading(tokens_read=1200, tokens_total=3500, eta_s=19.6)
    html = status_line(make_submission(alice), events.Progress(0, 1, "", reading))
    assert (
        '<span data-reading data-tokens-read="1200" data-tokens-total="3500">'
        "The model is reading your document: 1,200 of 3,500 tokens</span>, "
        '<span data-reading-eta data-eta-s="19.6">about 20 s left</span>'
    ) in html
    assert "writing" not in html and "data-progress" not in html


def test_a_silent_server_reads_with_the_time_expected(alice):
    reading = events.Reading(tokens_read=None, tokens_total=3500, eta_s=150.0)
    html = status_line(make_submission(alice), events.Progress(0, 1, "", reading))
    assert "The model is reading your document…</span>" in html
    assert ">about 2 min left</span>" in html


def test_a_plans_final_call_keeps_its_count_of_calls(alice):
    reading = events.Reading(tokens_read=100, tokens_total=900, eta_s=None)
    progress = events.Progress(11, 12, "Writing the report from the notes", reading)
    html = status_line(make_submission(alice), progress)
    assert "Writing the report from the notes (11 of 12 calls done)</span> — " in html
    # It reads the notes on the parts, not the document.
    assert "The model is reading its notes: 100 of 900 tokens</span>" in html
    assert "data-reading-eta" not in html


def test_while_a_scan_is_read_by_ocr_the_status_line_says_which_page(alice):
    # The parse's progress: no plan yet, so no calls to count.
    progress = events.Progress(0, 0, "Reading page 3 of 50 by OCR", None)
    html = status_line(make_submission(alice), progress)
    assert (
        '<span data-progress data-done="0" data-total="0">Reading page 3 of 50 by OCR</span>'
        in (html)
    )
    assert "calls done" not in html and "the model is reading" not in html


def test_before_any_word_from_the_model_it_is_reading_not_writing(alice):
    html = status_line(make_submission(alice), None)
    assert "the model is reading your document…" in html and "writing" not in html


def test_the_progress_event_carries_the_reading_and_the_fold_keeps_it(alice):
    draft = events.progress(0, 1, "x", tokens_read=5, tokens_total=10, eta_s=1.234)
    event = events.Event(task_id=None, seq=3, type=draft.type, data=draft.stamped(1))
    state = events.fold([event])
    assert state.progress.reading == events.Reading(5, 10, 1.2)
    # Text ends the reading: the status line says the report is being written.
    delta = events.delta("# T")
    state = events.fold([events.Event(None, 4, delta.type, delta.stamped(1))], state)
    state.status = "running"
    status = presentation.status_context(Task(), state, has_text=True)
    assert status["stage"] == "writing" and status["reading"] is None
