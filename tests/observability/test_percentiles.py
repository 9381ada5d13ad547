"""Nearest-rank percentiles against known samples, with timeouts and the small-sample flag."""

import pytest

from reports.observability.percentiles import Figure, Sample, nearest_rank, summarize


def test_nearest_rank_of_one_to_a_hundred_is_the_value_itself():
    summary = summarize(range(1, 101), small_below=20)
    assert summary[50] == Figure(50, False)
    assert summary[95] == Figure(95, False)
    assert summary[99] == Figure(99, False)
    assert summary.count == 100 and not summary.small


def test_known_small_sample():
    # The textbook example: 15, 20, 35, 40, 50 → P50 is 35 (rank ceil(2.5) = 3);
    # P95 and P99 are both the largest value (rank 5).
    summary = summarize([50, 15, 40, 20, 35], small_below=20)
    assert summary[50].ms == 35
    assert summary[95].ms == 50
    assert summary[99].ms == 50
    assert summary.small


def test_ranks_are_observed_values_not_interpolations():
    summary = summarize([100, 200, 300, 400], small_below=1)
    assert summary[50].ms == 200  # rank ceil(2.0) = 2, not 250
    assert summary[95].ms == 400
    assert nearest_rank(4, 25) == 0 and nearest_rank(4, 26) == 1
    assert nearest_rank(1, 0.1) == 0


def test_timeouts_count_as_lower_bounds_and_move_the_tail():
    exact = [100.0] * 95 + [200.0] * 3
    timed_out = [Sample(30_000, censored=True), Sample(30_000, censored=True)]
    without = summarize(exact, small_below=20)
    counted = summarize([*exact, *timed_out], small_below=20)
    assert without[99] == Figure(200, False)
    # 100 samples: P99 is rank 99, one of the two timeouts, reported as "at least 30 s".
    assert counted.count == 100 and counted.censored == 2
    assert counted[99] == Figure(30_000, True)
    assert counted[95] == Figure(100, False)


def test_a_censored_tie_does_not_mask_an_exact_value():
    summary = summarize([Sample(500, censored=True), 500], small_below=1)
    assert summary[50] == Figure(500, False)
    assert summary[99] == Figure(500, True)


def test_small_sample_flag_at_the_threshold():
    assert summarize([1] * 19, small_below=20).small
    assert not summarize([1] * 20, small_below=20).small


def test_no_samples():
    summary = summarize([], small_below=20)
    assert summary.count == 0 and summary.small
    assert summary[50] is None and summary[99] is None


def test_bad_percentiles_are_refused():
    with pytest.raises(ValueError):
        nearest_rank(0, 50)
    with pytest.raises(ValueError):
        nearest_rank(10, 0)
    with pytest.raises(ValueError):
        nearest_rank(10, 101)
