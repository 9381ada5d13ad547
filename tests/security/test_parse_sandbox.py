"""The parse sandbox: a child process that a hostile document can exhaust, never the server."""

from __future__ import annotations

import os
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reports.parsers import parser_for, sandbox
from reports.parsers.base import ParseError
from reports.parsers.sandbox import NICENESS, Limits, Stop, Stopped, run, stopped_by, told_to
from tests.helpers import wait_for
from tests.parsers import samples
from tests.security import hostile

GENEROUS = Limits(cpu_s=30, memory_mb=1024, wall_s=60)


def test_the_child_returns_the_documents_text():
    answer = run("reports.parsers.pdf.document_text", samples.text_pdf("One", "Two"), GENEROUS)
    assert answer == {"text": "One \fTwo", "ocr_pages": []}


def test_a_parse_error_in_the_child_reaches_the_caller_with_its_message():
    locked = samples.encrypted_pdf(samples.text_pdf("Secret"), "pw")
    with pytest.raises(ParseError, match="password-protected"):
        run("reports.parsers.pdf.document_text", locked, GENEROUS)


def test_a_child_that_burns_cpu_is_killed_at_its_cpu_limit():
    started = time.monotonic()
    with pytest.raises(ParseError, match=r"too long to read \(1 s of CPU time\)"):
        run("reports.parsers.pdf.document_text", hostile.pdf_that_explodes(), Limits(1, 1024, 60))
    # Killed by the kernel after one second of CPU time (SIGXCPU), well before the wall clock.
    assert time.monotonic() - started < 30


def test_a_child_that_blocks_without_cpu_is_killed_by_the_wall_clock():
    started = time.monotonic()
    with pytest.raises(ParseError, match=r"too long to read \(0.5 s\)"):
        run("tests.security.hostile.sleep_forever", b"", Limits(30, 1024, 0.5))
    assert time.monotonic() - started < 30


def test_a_child_may_ask_for_more_wall_clock_time_up_to_its_cap():
    # OCR asks for its pages' time; what it may add is capped by the caller.
    limits = Limits(30, 1024, 2, extra_wall_s=1.0)
    with pytest.raises(ParseError, match=r"too long to read \(3 s\)"):
        run("tests.security.hostile.asks_for_all_the_time", b"", limits)


def test_a_stopped_parse_takes_the_programs_its_child_started_with_it():
    # Tesseract, started by the child for each scanned page, must not outlive a cancel.
    stop, told = Stop(), queue.Queue()

    def parse():
        with stopped_by(stop), told_to(told.put):
            run("tests.security.hostile.starts_a_program_and_waits", b"", GENEROUS)

    with ThreadPoolExecutor(1) as pool:
        parsing = pool.submit(parse)
        program = int(told.get(timeout=30))
        stop.stop()
        with pytest.raises(Stopped):
            parsing.result(timeout=30)
    wait_for(lambda: not running(program), "the program to be killed", timeout=10)


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_child_that_allocates_without_end_is_stopped_at_its_memory_limit():
    limits = Limits(30, 256, 60)
    with pytest.raises(ParseError, match="too much memory"):
        run("tests.security.hostile.allocate_without_end", b"", limits)
    # The same limit leaves room for reading an ordinary document.
    assert run("reports.parsers.pdf.document_text", samples.text_pdf("Fine"), limits) == {
        "text": "Fine",
        "ocr_pages": [],
    }


def test_the_child_reads_at_a_lower_cpu_priority_than_the_server():
    # So a burst of documents to read cannot take the cores from the streams.
    assert run("tests.security.hostile.niceness", b"", GENEROUS) == os.nice(0) + NICENESS


def test_a_child_that_dies_otherwise_is_a_plain_could_not_be_read():
    with pytest.raises(ParseError, match="could not be read"):
        run("tests.security.hostile.no_such_function", b"", GENEROUS)


def test_the_pdf_parser_reads_through_the_sandbox_with_the_settings_limits(settings):
    settings.REPORTS_PARSE_CPU_S = 1
    with pytest.raises(ParseError, match="1 s of CPU time"):
        parser_for("x.pdf").extract(hostile.pdf_that_explodes())
    assert parser_for("x.pdf").extract(samples.text_pdf("Still fine")) == "Still fine"


def test_a_child_whose_answer_is_garbled_fails_the_document_plainly():
    with pytest.raises(ParseError, match="could not be read"):
        run("tests.security.hostile.write_to_stdout", b"", GENEROUS)


def test_a_sigterm_to_the_workers_process_group_leaves_the_parse_to_its_limits():
    # The worker drains on SIGTERM; the child must not die of it and blame the document.
    assert run("tests.security.hostile.terminated_midway", b"", GENEROUS) == ["text"]


def test_each_document_gets_a_fresh_child_and_a_dead_spare_is_replaced():
    # The next child is started as a parse ends; it reads one document, then exits.
    first = run("tests.security.hostile.own_pid", b"", GENEROUS)
    spare, _ = sandbox._spare.child
    second = run("tests.security.hostile.own_pid", b"", GENEROUS)
    assert second == spare.pid != first
    # A spare that died waiting (killed from outside) is not handed a document.
    waiting, _ = sandbox._spare.child
    waiting.kill()
    waiting.wait()
    third = run("tests.security.hostile.own_pid", b"", GENEROUS)
    assert third not in (first, second, waiting.pid)


def test_a_child_started_before_the_first_parse_reads_it(monkeypatch):
    monkeypatch.setattr(sandbox, "_spare", sandbox._Spare())  # a process that parsed nothing
    sandbox.keep_a_child_ready(("reports.parsers.markdown",))
    ready, _ = sandbox._spare.child
    try:
        assert run("tests.security.hostile.own_pid", b"", GENEROUS) == ready.pid
    finally:
        sandbox._discard(sandbox._spare.child)
