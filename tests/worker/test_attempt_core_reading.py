"""The attempt core while the model reads the prompt: the page is told how far, and silence
counts against the call only once the reading should be over. Instants are plain numbers."""

from __future__ import annotations

import pytest

from reports.providers.base import Completed, Heartbeat, ReadingProgress, TextDelta, Usage
from reports.states import ErrorType, Status
from reports.worker.attempt_core import (
    READING_MARGIN,
    Call,
    End,
    Limits,
    Reading,
    Write,
)
from reports.worker.retries import RetryPolicy

POLICY = RetryPolicy(max_attempts=3, max_wait_s=30, rerun_lost=True)
RESPONSE_TIMEOUT_S, STALL_TIMEOUT_S = 60.0, 30.0


def call(**reading) -> Call:
    limits = Limits(
        deadline=10_000.0,
        response_timeout_s=RESPONSE_TIMEOUT_S,
        stall_timeout_s=STALL_TIMEOUT_S,
        attempt=1,
        retries=POLICY,
    )
    return Call(limits, sent_at=0.0, **reading)


def ending(decisions):
    ends = [d.outcome for d in decisions if isinstance(d, End)]
    return ends[0] if ends else None


def shown(decisions) -> list[Reading]:
    return [d for d in decisions if isinstance(d, Reading)]


def progress(processed: int, total: int = 6000, *, time_ms: float | None = None, cached=0):
    return ReadingProgress(processed, total, cached, time_ms)


def test_a_long_read_at_the_learned_rate_is_not_a_stall():
    # 3,000 tokens at 100 a second: 30 s of reading, 60 s with the margin.
    c = call(prompt_tokens=3000, reading_rate=100.0)
    assert c.receive(Heartbeat(), 0.01) == []  # the server answered at once, then reads
    assert ending(c.tick(45.0)) is None  # past the stall timeout, but still reading
    over = 3000 / 100 * READING_MARGIN
    assert c.next_tick_at() == pytest.approx(over + STALL_TIMEOUT_S)
    assert ending(c.tick(over + STALL_TIMEOUT_S - 0.5)) is None
    outcome = ending(c.tick(over + STALL_TIMEOUT_S))
    assert (outcome.status, outcome.error_type) == (Status.FAILED, ErrorType.STALLED)


def test_without_a_learned_rate_the_stall_clock_starts_at_the_answer():
    c = call(prompt_tokens=3000)
    c.receive(Heartbeat(), 0.0)
    assert ending(c.tick(STALL_TIMEOUT_S)).error_type == ErrorType.STALLED


def test_a_server_that_answers_only_after_reading_is_given_the_reading_time():
    c = call(prompt_tokens=3000, reading_rate=100.0)
    assert ending(c.tick(RESPONSE_TIMEOUT_S + 1)) is None  # no answer yet: still reading
    outcome = ending(c.tick(60.0 + RESPONSE_TIMEOUT_S))
    assert outcome.status == Status.RECONCILIATION_REQUIRED


def test_the_servers_progress_is_shown_and_keeps_the_call_alive():
    c = call(prompt_tokens=1000)  # the estimate is wrong; the server's count wins
    c.receive(Heartbeat(), 0.0)
    for n in range(1, 6):  # 1,000 tokens every 10 s: slower than the stall timeout allows
        decisions = c.receive(progress(1000 * n, time_ms=10_000.0 * n), 10.0 * n)
        assert ending(decisions) is None
        (reading,) = shown(decisions)
        assert (reading.tokens_read, reading.tokens_total) == (1000 * n, 6000)
        assert reading.eta_s == pytest.approx((6000 - 1000 * n) / 100)
    # At 100 tokens a second, the last 1,000 take 10 s: silence counts from then.
    assert ending(c.tick(50.0 + 10 * READING_MARGIN + STALL_TIMEOUT_S - 0.5)) is None
    assert ending(c.tick(50.0 + 10 * READING_MARGIN + STALL_TIMEOUT_S)).error_type == (
        ErrorType.STALLED
    )


def test_progress_is_shown_at_most_every_second_and_when_the_reading_is_whole():
    c = call()
    assert shown(c.receive(progress(128, 512, time_ms=100), 0.1))
    assert c.receive(progress(256, 512, time_ms=200), 0.2) == []
    assert shown(c.receive(progress(384, 512, time_ms=1100), 1.2))
    (whole,) = shown(c.receive(progress(512, 512, time_ms=1200), 1.3))
    assert whole.tokens_read == 512 and whole.eta_s == 0


def test_once_text_arrives_the_usual_stall_clock_applies():
    c = call(prompt_tokens=3000, reading_rate=100.0)
    c.receive(TextDelta("# T\n\n"), 5.0)
    assert ending(c.tick(5.0 + STALL_TIMEOUT_S)).error_type == ErrorType.STALLED


def test_the_estimate_is_what_the_page_is_told_before_the_server_says_anything():
    c = call(prompt_tokens=3000, reading_rate=100.0)
    assert c.reading_now() == Reading(None, 3000, 30.0)
    assert call().reading_now() == Reading(None, None, None)


def test_the_wait_inside_the_server_is_told_apart_from_the_reading():
    c = call()
    # The first progress comes 12 s after the request, the server having read for 2 s:
    # the request waited 10 s for a slot.
    c.receive(progress(128, 512, time_ms=2000.0), 12.0)
    assert c.server_wait_s() == pytest.approx(10.0)
    # Without the server's timing: the first text's wait beyond the reading expected.
    c = call(prompt_tokens=1000, reading_rate=100.0)
    c.receive(TextDelta("# T"), 25.0)
    assert c.server_wait_s() == pytest.approx(15.0)


def test_the_reading_taken_comes_from_the_servers_timings_else_the_usage():
    c = call()
    c.receive(TextDelta("# T\n\n## Summary\n\nText.\n\n## More\n\nText."), 4.0)
    c.receive(ReadingProgress(900, 900, cached=100, time_ms=4000.0), 4.5)  # the timings
    assert c.reading_taken() == (800, 4.0)
    c = call()
    c.receive(TextDelta("# T"), 2.0)
    c.receive(Completed("stop", Usage(input_tokens=500, cached_tokens=100)), 3.0)
    assert c.reading_taken() == (400, 2.0)


def test_reading_progress_writes_no_text():
    c = call()
    decisions = c.receive(progress(10, 20, time_ms=10), 0.0)
    assert not [d for d in decisions if isinstance(d, Write)]


def test_a_report_written_in_sections_teaches_the_rate_of_its_first_reading():
    # The `local` provider's skeleton: the Summary's call reads the whole prompt, the
    # Key points' call only the few tokens its cache lacks. The rate is the first one's.
    c = call()
    c.receive(progress(0, 708, time_ms=0.0), 0.1)
    c.receive(progress(708, 708, time_ms=6546.0), 6.6)
    c.receive(TextDelta("# T\n\n## Summary\n\nIn short, trees cool streets."), 6.7)
    c.receive(ReadingProgress(708, 708, cached=0, time_ms=6546.0), 9.0)  # its timings
    c.receive(progress(921, 921, time_ms=80.0, cached=913), 9.2)  # the next section's
    c.receive(TextDelta("\n\n## Key points\n\n- Shade helps."), 9.3)
    c.receive(ReadingProgress(921, 921, cached=913, time_ms=80.0), 12.0)
    assert c.reading_taken() == (708, pytest.approx(6.546))
