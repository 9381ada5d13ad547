"""The attempt core alone: fed stream items, instants and stops, it says what to write and how
the call ends. No clock, no database: each instant is a number the test chooses."""

from __future__ import annotations

import dataclasses

import pytest

from reports.providers.base import Completed, Heartbeat, ProviderError, Retry, TextDelta, Usage
from reports.states import ErrorType, Status
from reports.worker.attempt_core import (
    CANCEL,
    FLUSH_CHARS,
    LEASE_LOST,
    Abandon,
    Call,
    End,
    Limits,
    StreamEnded,
    Write,
    cap_chars,
    past_deadline_at_start,
)
from reports.worker.loops import LoopCheck
from reports.worker.retries import RetryPolicy

POLICY = RetryPolicy(max_attempts=3, max_wait_s=30, rerun_lost=True)
RESPONSE_TIMEOUT_S, STALL_TIMEOUT_S, DEADLINE = 60.0, 30.0, 600.0


def call(*, attempt: int = 1, deadline: float = DEADLINE, policy=POLICY, sent_at=0.0) -> Call:
    limits = Limits(
        deadline=deadline,
        response_timeout_s=RESPONSE_TIMEOUT_S,
        stall_timeout_s=STALL_TIMEOUT_S,
        attempt=attempt,
        retries=policy,
    )
    return Call(limits, sent_at=sent_at)


def written(decisions) -> list[str]:
    return [d.text for d in decisions if isinstance(d, Write)]


def ending(decisions):
    ends = [d.outcome for d in decisions if isinstance(d, End)]
    return ends[0] if ends else None


# --- coalescing ----------------------------------------------------------------------------


def test_the_first_text_goes_out_delta_by_delta_then_about_every_100_ms():
    c = call()
    assert written(c.receive(TextDelta("# Title\n\n"), 1.0)) == ["# Title\n\n"]
    assert written(c.receive(TextDelta("one "), 1.05)) == ["one "]
    assert written(c.receive(TextDelta("two "), 1.14)) == ["two "]
    # Past the first 150 ms: text waits for the interval…
    assert c.receive(TextDelta("three "), 1.2) == []
    assert c.receive(TextDelta("four "), 1.25) == []
    assert c.next_tick_at() == pytest.approx(1.3)
    # …and goes out as one chunk when it falls due, with nothing received.
    assert written(c.tick(c.next_tick_at())) == ["three four "]
    assert c.tick(1.35) == []  # nothing waiting, nothing written


def test_text_that_arrives_once_the_interval_has_passed_goes_out_with_it():
    c = call()
    c.receive(TextDelta("# T\n\n"), 0.0)
    assert c.receive(TextDelta("a"), 0.2) == []
    assert written(c.receive(TextDelta("b"), 0.31)) == ["ab"]


def test_a_chunk_goes_out_at_once_when_it_reaches_the_size():
    c = call()
    c.receive(TextDelta("# T\n\n"), 0.0)
    assert c.receive(TextDelta("x" * (FLUSH_CHARS - 1)), 0.2) == []
    assert written(c.receive(TextDelta("y"), 0.21)) == ["x" * (FLUSH_CHARS - 1) + "y"]


def test_unstorable_characters_are_dropped_or_replaced():
    c = call()
    assert written(c.receive(TextDelta("a\x00b\ud800c"), 0.0)) == ["ab\ufffdc"]
    assert c.text == "ab\ufffdc"


# --- the backslash rule --------------------------------------------------------------------


def test_a_chunk_never_ends_in_a_lone_backslash_while_the_stream_goes_on():
    c = call()
    assert written(c.receive(TextDelta("# Costs 5 \\"), 0.0)) == ["# Costs 5 "]
    # The backslash waits for the text it escapes, and goes out with it.
    assert written(c.receive(TextDelta("* 3"), 0.01)) == ["\\* 3"]
    assert c.text == "# Costs 5 \\* 3"


def test_an_even_run_of_backslashes_is_not_held_back():
    c = call()
    assert written(c.receive(TextDelta("a \\\\"), 0.0)) == ["a \\\\"]
    assert written(c.receive(TextDelta("b \\\\\\"), 0.01)) == ["b \\\\"]


def test_a_held_backslash_waits_without_a_timer_and_ends_with_the_stream():
    c = call()
    c.receive(TextDelta("# T\n\n"), 0.0)
    assert c.receive(TextDelta("end \\"), 0.2) == []
    assert written(c.tick(c.next_tick_at())) == ["end "]
    # Only the backslash waits: no write falls due, only the stall clock.
    assert c.next_tick_at() == pytest.approx(0.2 + STALL_TIMEOUT_S)
    decisions = c.receive(Completed("stop"), 0.4)
    assert written(decisions) == ["\\"]
    assert ending(decisions).status == Status.FINALIZING


# --- the silence clocks and the deadline ---------------------------------------------------


def test_no_answer_within_the_response_timeout_is_an_unknown_outcome():
    c = call(sent_at=5.0)
    assert c.next_tick_at() == 5.0 + RESPONSE_TIMEOUT_S
    assert c.tick(5.0 + RESPONSE_TIMEOUT_S - 0.01) == []
    outcome = ending(c.tick(5.0 + RESPONSE_TIMEOUT_S))
    assert outcome.status == Status.RECONCILIATION_REQUIRED
    assert not c.answered


def test_heartbeats_answer_but_do_not_stop_the_stall_clock():
    c = call()
    c.receive(TextDelta("# Started\n\n"), 1.0)
    for second in range(5, 30, 5):
        assert c.receive(Heartbeat(request_id="req-9"), 1.0 + second) == []
    outcome = ending(c.receive(Heartbeat(), 1.0 + STALL_TIMEOUT_S))
    assert (outcome.status, outcome.error_type) == (Status.FAILED, ErrorType.STALLED)
    assert c.text == "# Started\n\n" and c.request_id == "req-9"


def test_a_heartbeat_alone_moves_the_call_from_the_response_clock_to_the_stall_clock():
    c = call()
    c.receive(Heartbeat(), 1.0)
    assert c.next_tick_at() == STALL_TIMEOUT_S  # from the request, not the heartbeat
    outcome = ending(c.tick(STALL_TIMEOUT_S))
    assert (outcome.status, outcome.error_type) == (Status.FAILED, ErrorType.STALLED)


def test_the_deadline_ends_the_call_writing_what_was_waiting():
    c = call(deadline=10.0)
    c.receive(TextDelta("# Slow\n\n"), 1.0)
    c.receive(TextDelta("word "), 9.95)
    assert c.next_tick_at() == 10.0
    decisions = c.tick(10.0)
    assert written(decisions) == ["word "]
    outcome = ending(decisions)
    assert (outcome.status, outcome.error_type) == (Status.FAILED, ErrorType.TIMEOUT)


def test_text_received_past_the_deadline_is_not_taken():
    c = call(deadline=10.0)
    c.receive(TextDelta("# Slow\n\n"), 1.0)
    decisions = c.receive(TextDelta("late"), 10.5)
    assert ending(decisions).error_type == ErrorType.TIMEOUT
    assert "late" not in c.text


def test_a_task_that_waited_past_its_deadline_never_starts():
    limits = call(deadline=10.0).limits
    assert past_deadline_at_start(limits, 9.0) is None
    outcome = past_deadline_at_start(limits, 10.0)
    assert (outcome.status, outcome.error_type) == (Status.FAILED, ErrorType.TIMEOUT)


# --- stops ---------------------------------------------------------------------------------


def test_a_cancel_keeps_the_text_that_arrived_before_it():
    c = call()
    c.receive(TextDelta("# Partial\n\n"), 0.0)
    assert c.receive(TextDelta("first words"), 0.2) == []  # waiting to be written
    c.stop(CANCEL)
    decisions = c.receive(TextDelta(" and the rest"), 0.21)
    assert written(decisions) == ["first words and the rest"]
    outcome = ending(decisions)
    assert (outcome.status, outcome.message) == (Status.CANCELLED, "Cancelled by you.")


def test_a_stop_with_nothing_received_ends_at_the_next_tick():
    c = call()
    c.stop(CANCEL)
    assert ending(c.tick(0.01)).status == Status.CANCELLED


def test_a_lost_lease_writes_nothing_more_and_the_first_stop_stands():
    c = call()
    c.receive(TextDelta("# T\n\n"), 0.0)
    c.receive(TextDelta("waiting"), 0.2)
    c.stop(LEASE_LOST)
    c.stop(CANCEL)
    assert c.receive(TextDelta("more"), 0.25) == [Abandon()]


# --- how a stream ends ---------------------------------------------------------------------


def test_a_completed_stream_with_text_is_whole_and_keeps_its_usage():
    c = call()
    c.receive(TextDelta("# Report\n\nText."), 0.0)
    usage = Usage(10, 20, None, "provider")
    outcome = ending(c.receive(Completed("stop", usage, request_id="req-1"), 0.5))
    assert outcome.status == Status.FINALIZING
    assert (c.usage, c.request_id) == (usage, "req-1")


@pytest.mark.parametrize(
    ("items", "error_type"),
    [
        ([TextDelta("# Half"), StreamEnded()], ErrorType.STREAM_TRUNCATED),
        ([StreamEnded()], ErrorType.STREAM_TRUNCATED),
        ([TextDelta("# Capped"), Completed("length")], ErrorType.STREAM_TRUNCATED),
        ([Completed("stop")], ErrorType.EMPTY_OUTPUT),
        ([TextDelta(" \n\n "), Completed("stop")], ErrorType.EMPTY_OUTPUT),
    ],
    ids=["dropped-after-text", "dropped-before-text", "finish-length", "empty", "blank"],
)
def test_a_stream_that_is_not_a_whole_report_fails(items, error_type):
    c = call()
    decisions = []
    for i, item in enumerate(items):
        decisions = c.receive(item, i * 0.01)
    outcome = ending(decisions)
    assert (outcome.status, outcome.error_type) == (Status.FAILED, error_type)


def test_text_waiting_when_the_stream_ends_is_written_before_the_end():
    c = call()
    c.receive(TextDelta("# T\n\n"), 0.0)
    c.receive(TextDelta("tail"), 0.2)
    decisions = c.receive(StreamEnded(), 0.21)
    assert decisions[0] == Write("tail") and isinstance(decisions[1], End)


# --- the retry table -----------------------------------------------------------------------


def provider_error(retry: Retry, retry_after_s=None) -> ProviderError:
    return ProviderError(
        ErrorType.RATE_LIMITED, "429", retry=retry, retry_after_s=retry_after_s, request_id="r"
    )


def test_a_retryable_error_before_any_text_queues_another_attempt_after_its_wait():
    c = call(attempt=1)
    outcome = ending(c.receive(provider_error(Retry.RETRYABLE, retry_after_s=2), 1.0))
    assert (outcome.status, outcome.retry_after_s) == (Status.QUEUED, 2)
    assert c.request_id == "r"


@pytest.mark.parametrize(
    ("case", "attempt", "retry_after_s", "deadline"),
    [
        ("the last attempt", 3, None, DEADLINE),
        ("a wait longer than the retry may wait", 1, 31, DEADLINE),
        ("a wait that ends past the deadline", 1, 5, 5.5),
    ],
)
def test_a_retryable_error_fails_the_task_when_it_cannot_be_retried(
    case, attempt, retry_after_s, deadline
):
    c = call(attempt=attempt, deadline=deadline)
    outcome = ending(c.receive(provider_error(Retry.RETRYABLE, retry_after_s), 1.0))
    assert (outcome.status, outcome.error_type) == (Status.FAILED, ErrorType.RATE_LIMITED), case


def test_no_retry_after_text_arrived():
    c = call()
    c.receive(TextDelta("# Some text"), 0.0)
    decisions = c.receive(provider_error(Retry.RETRYABLE), 0.5)
    assert ending(decisions).status == Status.FAILED


def test_a_permanent_error_fails_at_once():
    outcome = ending(call().receive(provider_error(Retry.PERMANENT), 0.0))
    assert outcome.status == Status.FAILED


def test_an_error_that_may_have_taken_effect_is_an_unknown_outcome():
    outcome = ending(call().receive(provider_error(Retry.UNKNOWN), 0.0))
    assert outcome.status == Status.RECONCILIATION_REQUIRED


@pytest.mark.parametrize(
    ("task_status", "attempt", "rerun_lost", "to"),
    [
        (Status.RUNNING, 1, True, Status.QUEUED),
        (Status.RUNNING, 3, True, Status.FAILED),
        (Status.RUNNING, 1, False, Status.RECONCILIATION_REQUIRED),
        (Status.FINALIZING, 1, True, Status.FAILED),
        (Status.FINALIZING, 1, False, Status.FAILED),
    ],
)
def test_the_lost_worker_rule(task_status, attempt, rerun_lost, to):
    policy = RetryPolicy(max_attempts=3, max_wait_s=30, rerun_lost=rerun_lost)
    assert policy.after_lost_worker(task_status=task_status, attempt=attempt) == to


# --- the output's guards: the cap, and a stream that loops ---------------------------------


def capped(max_output_tokens: int, *, stop_loops: bool = True) -> Call:
    limits = dataclasses.replace(call().limits, stop_loops=stop_loops)
    return Call(limits, sent_at=0.0, max_output_tokens=max_output_tokens)


def test_a_provider_that_ignores_the_cap_is_cut_at_what_the_cap_can_hold():
    c = capped(10)  # at most cap_chars(10) characters
    room = cap_chars(10)
    written_text = []
    decisions = []
    for i in range(1000):  # far more than the cap, and never a completion
        decisions = c.receive(TextDelta(f"word{i:03d} "), i * 0.01)
        written_text += written(decisions)
        if ending(decisions):
            break
    outcome = ending(decisions)
    assert (outcome.status, outcome.error_type) == (Status.FAILED, ErrorType.STREAM_TRUNCATED)
    assert "output cap of 10 tokens" in outcome.message
    assert len(c.text) == room  # what arrived up to the cap is kept, nothing past it
    assert "".join(written_text) == c.text


def test_text_up_to_the_cap_is_not_cut():
    c = capped(10)
    c.receive(TextDelta("# T\n\n" + "x" * (cap_chars(10) - 5)), 0.0)
    outcome = ending(c.receive(Completed("stop"), 0.1))
    assert outcome.status == Status.FINALIZING


def test_an_estimated_output_count_past_the_cap_proves_nothing():
    # The simulated model reports estimates: only a provider's own count shows an overrun.
    c = capped(10)
    c.receive(TextDelta("# Report\n\nShort."), 0.0)
    outcome = ending(c.receive(Completed("stop", Usage(5, 750_060, None, "estimate")), 0.1))
    assert outcome.status == Status.FINALIZING


def test_a_completion_whose_reported_output_passed_the_cap_fails_truncated():
    c = capped(10)
    c.receive(TextDelta("# Report\n\nShort."), 0.0)
    outcome = ending(c.receive(Completed("stop", Usage(5, 750_060, None, "provider")), 0.1))
    assert (outcome.status, outcome.error_type) == (Status.FAILED, ErrorType.STREAM_TRUNCATED)
    assert "750,060" in outcome.message


LOOP = "<pre><code>"


def test_a_stream_that_loops_ends_degenerate_keeping_its_text():
    c = capped(100_000)
    decisions = c.receive(TextDelta("# Report\n\n## Summary\n\nThe code:\n\n"), 0.0)
    written_text = written(decisions)
    for i in range(1, 2000):
        decisions = c.receive(TextDelta(LOOP), i * 0.01)
        written_text += written(decisions)
        if ending(decisions):
            break
    outcome = ending(decisions)
    assert (outcome.status, outcome.error_type) == (Status.FAILED, ErrorType.DEGENERATE_OUTPUT)
    assert c.text.startswith("# Report") and c.text.endswith(LOOP)
    assert len(c.text) < 3_000  # stopped within a few hundred tokens, not at the cap
    assert "".join(written_text) == c.text  # all of it written before the end


def test_a_loop_that_shows_in_the_last_chunk_before_the_completion_still_ends_degenerate():
    # The check reads each chunk as it is written; the last is written by the end itself.
    head = "# Report\n\n## Summary\n\nThe code:\n\n"
    text = head + LOOP * 100
    check = LoopCheck()
    fires_at = next(i for i in range(1, len(text) + 1) if check.feed(text[i - 1]))
    c = capped(100_000)
    c.receive(TextDelta(head), 0.0)
    c.receive(TextDelta(LOOP), 0.2)
    assert written(c.receive(TextDelta(text[len(head) + len(LOOP) : fires_at - 5]), 0.5))
    assert not written(c.receive(TextDelta(text[fires_at - 5 : fires_at + 5]), 0.55))  # waits
    decisions = c.receive(Completed("stop"), 0.56)
    assert written(decisions) == [text[fires_at - 5 : fires_at + 5]]
    outcome = ending(decisions)
    assert (outcome.status, outcome.error_type) == (Status.FAILED, ErrorType.DEGENERATE_OUTPUT)


def test_loops_are_let_through_when_stopping_them_is_off():
    c = capped(100_000, stop_loops=False)
    for i in range(2000):
        assert ending(c.receive(TextDelta(LOOP), i * 0.01)) is None
