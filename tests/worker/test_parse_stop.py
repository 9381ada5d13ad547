"""A parse under way ends when nobody needs it any more: a cancel kills it at once, and a
worker stopped by SIGTERM ends it at its deadline rather than wait for it."""

import signal
import time
from pathlib import Path

import pytest

from reports import lifecycle, submissions
from reports.models import Attempt, Task
from reports.submissions import Submission, Upload
from tests.helpers import wait_for
from tests.security import hostile

pytestmark = pytest.mark.django_db(transaction=True)


def sandboxes_of(pid: int) -> list[int]:
    """Return the parse children of process `pid`, from /proc: a thread or child that ended
    while it was read is not one of them."""
    children = []
    for thread in Path(f"/proc/{pid}/task").iterdir():
        children += [int(child) for child in _read(thread / "children").split()]
    return [child for child in children if b"reports.parsers.sandbox" in _read_bytes(child)]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:  # the thread ended
        return ""


def _read_bytes(child: int) -> bytes:
    try:
        return Path(f"/proc/{child}/cmdline").read_bytes()
    except FileNotFoundError:  # the child ended (the worker starts short-lived ones too)
        return b""


def slow_page_task(owner) -> Task:
    page = Upload("slow.html", ".html", hostile.slow_html())
    task, _ = submissions.submit(owner, Submission((page,), "", "ok", None))
    return task


def reading(task: Task) -> bool:
    return Attempt.objects.filter(task=task, parsing_since__isnull=False).exists()


def test_a_worker_has_a_parse_child_ready_before_its_first_task(spawn_worker):
    # Started with the worker: the first report after a start or a deploy does not wait
    # for an interpreter to start before its document is read.
    worker = spawn_worker(1)
    wait_for(lambda: len(sandboxes_of(worker.pid)) == 1, "the worker's waiting parse child")


def test_a_cancel_reaches_a_task_still_reading_its_document(alice, spawn_worker):
    task = slow_page_task(alice)
    worker = spawn_worker(1, REPORTS_PARSE_CPU_S="60", REPORTS_PARSE_TIMEOUT_S="120")
    wait_for(lambda: reading(task) and sandboxes_of(worker.pid), "the worker to read the page")
    # The child a worker starts with reads the page; the next starts when this one ends.
    reader = set(sandboxes_of(worker.pid))

    assert lifecycle.cancel_task(task)
    cancelled = time.monotonic()
    wait_for(
        lambda: Task.objects.filter(pk=task.pk, status="cancelled").exists(),
        "the cancel to end the task",
        timeout=30,
    )
    # Within a few lease renewals, not at the parse's limits (a minute of CPU).
    assert time.monotonic() - cancelled < 10
    assert not reader & set(sandboxes_of(worker.pid))  # killed, not left to finish
    attempt = Attempt.objects.get(task=task)
    assert (attempt.status, attempt.error_type) == ("cancelled", "")
    assert worker.poll() is None


def test_sigterm_ends_a_parse_at_its_deadline(alice, spawn_worker):
    task = slow_page_task(alice)
    worker = spawn_worker(1, REPORTS_PARSE_CPU_S="60", REPORTS_PARSE_TIMEOUT_S="2")
    wait_for(lambda: reading(task), "the worker to read the page")

    worker.send_signal(signal.SIGTERM)
    # The drain waits for the parse only until its deadline (2 s), then the worker exits.
    assert worker.wait(timeout=20) == 0
    task.refresh_from_db()
    assert (task.status, task.error_type) == ("failed", "invalid_input")
    assert "took too long to read (2 s)" in task.user_message
