"""The release gate's judging (`python -m bench.slo`), on made-up figures: no benchmark
runs here (timings on a shared machine are not a test)."""

from __future__ import annotations

import json

import pytest

from bench import harness, slo

SANE_BARE_MS = (50, 150)


@pytest.fixture(autouse=True)
def results_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "RESULTS", tmp_path)
    return tmp_path


def suite(*checks):
    def run(sizes):
        return list(checks)

    return run


def quiet():
    return []


def lag(figure, bare=102.0):
    return slo.Check("fan-out lag P99", figure, slo.at_most(250, " ms"), "ms", bare, SANE_BARE_MS)


def test_a_missed_target_fails_the_gate_and_is_saved(capsys, results_dir):
    lossless = slo.Check("streams lost", 0, slo.at_most(0))
    assert slo.gate([suite(lag(240), lossless)], quick=False, quiet=quiet) == 0
    assert slo.gate([suite(lag(260), lossless)], quick=False, quiet=quiet) == 1
    out = capsys.readouterr().out
    assert "MISSED" in out and "exit 1" in out
    saved = json.loads((results_dir / "slo.json").read_text())
    assert saved["data"]["exit"] == 1
    assert saved["data"]["verdicts"] == {"fan-out lag P99": "MISSED", "streams lost": "met"}


def test_a_busy_machine_is_not_judged_and_runs_nothing(capsys, results_dir):
    ran = []

    def measured(sizes):
        ran.append(sizes)
        return [lag(100)]

    busy = slo.unquiet(1.4, 2, [("python (4242)", 0.93)])
    assert busy == ["1-minute load average 1.40 > 1", "python (4242) used 93% of a core"]
    assert slo.gate([measured], quick=False, quiet=lambda: busy) == 2
    assert ran == []
    out = capsys.readouterr().out
    assert "not judged: the machine is not quiet" in out and "exit 2" in out
    assert not (results_dir / "slo.json").exists()  # the last judged run's file stays
    assert slo.unquiet(0.3, 2, []) == []


def test_a_ratio_target_is_judged_against_the_baseline_of_the_same_run():
    # The same replay figure meets 1.5x a static page of 44 ms and misses 1.5x one of 36 ms.
    def replay(static):
        check = slo.Check("replay P50", 60.0, slo.baseline_times(1.5), "ms", static, (1, 150))
        return check.judge()

    assert (replay(44.0), replay(36.0)) == ("met", "MISSED")
    plus = slo.Check("first text P50", 40.0, slo.baseline_plus(30, " ms"), "ms", 9.0, (0, 50))
    assert plus.judge() == "MISSED"
    plus.baseline = 11.0
    assert plus.judge() == "met"


def test_a_baseline_outside_its_sane_range_is_not_judged(capsys):
    # A bare push with a P99 of 400 ms means the machine, not the build, was slow.
    assert slo.gate([suite(lag(240, bare=400.0))], quick=False, quiet=quiet) == 2
    out = capsys.readouterr().out
    assert "not judged (baseline 400.0 outside its sane 50 to 150)" in out


def test_quick_judges_nothing_and_saves_nothing(capsys, results_dir):
    assert slo.gate([suite(lag(900))], quick=True, quiet=lambda: ["busy"]) == 0
    out = capsys.readouterr().out
    assert "not judged (--quick)" in out and "MISSED" not in out
    assert not (results_dir / "slo.json").exists()


def test_a_benchmark_that_breaks_is_a_miss_and_the_others_still_run(capsys):
    def broken(sizes):
        raise RuntimeError("the clients failed")

    ran = suite(lag(100))
    assert slo.gate([broken, ran], quick=False, quiet=quiet) == 1
    out = capsys.readouterr().out
    assert "broken: ran to the end" in out and "the clients failed" in out
    assert "fan-out lag P99" in out
    assert slo.gate([broken, ran], quick=True, quiet=quiet) == 1
