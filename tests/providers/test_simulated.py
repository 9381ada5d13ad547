"""The simulated provider: every scenario as the task runner sees it, on a fake clock."""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.core.exceptions import ImproperlyConfigured

import reports.providers
from reports.clock import FakeClock
from reports.parsers import passages
from reports.providers import SCENARIOS, get_provider
from reports.providers.base import (
    Completed,
    GenerationRequest,
    Heartbeat,
    ProviderError,
    Retry,
    SourceDocument,
    TextDelta,
)
from reports.providers.prompts import CHARS_PER_TOKEN, estimated_usage, prompt_chars
from reports.providers.report_writer import write_report
from reports.providers.simulated import SimulatedProvider, tokenize
from reports.validation import validate_report

SAMPLE = (Path(__file__).parent.parent / "fixtures" / "sample_article.md").read_text()
DOCS = (SourceDocument("sample_article.md", SAMPLE),)
TASK_ID = "0f3c2a9e-5d41-4b7e-9c1a-2e6f8d7b3a10"
START = 1000.0


@dataclass
class Run:
    items: list = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    error: ProviderError | None = None
    end: float = START

    @property
    def deltas(self) -> list[TextDelta]:
        return [i for i in self.items if isinstance(i, TextDelta)]

    @property
    def text(self) -> str:
        return "".join(d.text for d in self.deltas)

    @property
    def completed(self) -> Completed | None:
        last = self.items[-1] if self.items else None
        return last if isinstance(last, Completed) else None

    def first_text_at(self) -> float:
        return next(
            t for i, t in zip(self.items, self.times, strict=True) if isinstance(i, TextDelta)
        )


def request(scenario: str = "ok", attempt: int = 1, **kwargs) -> GenerationRequest:
    kwargs.setdefault("documents", DOCS)
    return GenerationRequest(TASK_ID, attempt, scenario=scenario, **kwargs)


async def collect(provider: SimulatedProvider, req: GenerationRequest, limit: int = 100_000) -> Run:
    run = Run()
    stream = provider.stream(req)
    try:
        async for item in stream:
            run.items.append(item)
            run.times.append(provider.clock.monotonic())
            if len(run.items) >= limit:
                break
    except ProviderError as exc:
        run.error = exc
    finally:
        await stream.aclose()
    run.end = provider.clock.monotonic()
    return run


def simulated(**options) -> SimulatedProvider:
    return SimulatedProvider(clock=FakeClock(START), **options)


def test_scenarios_are_the_spec_table():
    assert SCENARIOS == (
        "ok", "slow", "error", "truncated", "empty", "stall", "rate_limited", "invalid",
    )  # fmt: skip


@pytest.mark.parametrize("text", ["", "a", "Hello, world!\n\n  indented  \n", "x" * 11 + "  \n"])
def test_tokens_join_back_to_the_text(text):
    tokens = tokenize(text)
    assert "".join(tokens) == text
    assert all(len(t.strip()) <= 4 for t in tokens)


async def test_ok_streams_the_whole_report_then_completes():
    run = await collect(simulated(), request())
    report = write_report(DOCS, "")
    assert run.error is None
    assert run.text == report
    assert validate_report(run.text, max_kb=200) == []
    assert [type(i) for i in run.items[:1]] == [Heartbeat]  # the provider answered
    done = run.completed
    assert done is not None and done.finish_reason == "stop"
    assert done.request_id == f"sim-{TASK_ID[:8]}-1"
    assert done.usage.source == "estimate"
    assert done.usage.cached_tokens is None
    # Counted as a call cut short is estimated: the prompt sent, the text written.
    assert done.usage == estimated_usage(prompt_chars(request()), report)
    assert run.first_text_at() == pytest.approx(START + 0.45)


async def test_ok_quotes_instructions_and_counts_them_as_input():
    run = await collect(simulated(), request(instructions="Focus on heat waves."))
    assert run.text == write_report(DOCS, "Focus on heat waves.")
    assert "## Your instructions" in run.text
    asked = request(instructions="Focus on heat waves.")
    assert run.completed.usage.input_tokens == math.ceil(prompt_chars(asked) / CHARS_PER_TOKEN)


async def test_slow_waits_three_seconds_then_trickles_for_tens_of_seconds():
    run = await collect(simulated(ttft_s=0, tokens_per_s=1000), request("slow"))
    assert run.first_text_at() >= START + 3.0
    assert run.end - START > 20
    tokens = len(run.deltas)
    assert run.end - START == pytest.approx(3.0 + (tokens - 1) / 10)
    # Heartbeats while waiting for the first token: the provider is alive, not progressing.
    before_text = run.items[: run.items.index(run.deltas[0])]
    assert len(before_text) >= 3 and all(isinstance(i, Heartbeat) for i in before_text)
    assert run.completed.finish_reason == "stop"
    assert run.text == write_report(DOCS, "")


class EarlyClock(FakeClock):
    """A clock whose naps end a little before they are due, as uvloop's timers do: they
    count whole milliseconds."""

    async def sleep(self, seconds: float) -> None:
        await super().sleep(max(0.0, seconds - 0.0004))


async def test_a_timer_that_wakes_a_hair_early_sends_the_chunk_and_no_heartbeat():
    provider = SimulatedProvider(clock=EarlyClock(START), ttft_s=0, tokens_per_s=50)
    run = await collect(provider, request())
    assert run.text == write_report(DOCS, "")
    # The answer's heartbeat, then nothing but text: the stream is never a second silent.
    assert [type(i) for i in run.items[:1]] == [Heartbeat]
    assert not any(isinstance(i, Heartbeat) for i in run.items[1:])


async def test_error_disconnects_after_some_text():
    run = await collect(simulated(), request("error"))
    report = write_report(DOCS, "")
    assert run.completed is None
    assert run.deltas, "text arrives before the error"
    assert report.startswith(run.text)
    assert 0.2 < len(run.text) / len(report) < 0.4
    err = run.error
    assert err is not None
    assert err.error_type == "provider_error"
    assert err.retry is Retry.RETRYABLE
    assert err.retry_after_s is None
    assert err.message == "The provider closed the connection mid-stream."


async def test_truncated_ends_without_a_completion_signal():
    run = await collect(simulated(), request("truncated"))
    report = write_report(DOCS, "")
    assert run.error is None
    assert run.completed is None
    assert not any(isinstance(i, Completed) for i in run.items)
    assert report.startswith(run.text)
    assert 0.3 < len(run.text) / len(report) < 0.5


async def test_empty_completes_with_no_text():
    run = await collect(simulated(), request("empty"))
    assert run.error is None
    assert run.deltas == []
    assert run.completed.finish_reason == "stop"
    assert run.completed.usage.output_tokens == 0


async def test_stall_sends_heartbeats_forever_and_stops_when_closed():
    provider = simulated()
    stream = provider.stream(request("stall"))
    items = []
    async for item in stream:
        items.append(item)
        if len(items) == 40:
            break
    await stream.aclose()
    assert all(isinstance(i, Heartbeat) for i in items)
    assert provider.clock.monotonic() - START == pytest.approx(39.0)
    # Closed means finished: nothing more comes, and no time passes.
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    assert provider.clock.monotonic() - START == pytest.approx(39.0)


async def test_rate_limited_refuses_the_first_attempt_before_any_text():
    run = await collect(simulated(), request("rate_limited", attempt=1))
    assert run.items == []
    err = run.error
    assert err is not None
    assert err.error_type == "rate_limited"
    assert err.retry is Retry.RETRYABLE
    assert err.retry_after_s == 2
    assert err.status_code == 429
    assert err.message == "The provider asked us to wait 2 s."


async def test_rate_limited_second_attempt_behaves_as_ok():
    run = await collect(simulated(), request("rate_limited", attempt=2))
    assert run.error is None
    assert run.text == write_report(DOCS, "")
    assert run.completed.finish_reason == "stop"
    assert run.completed.request_id == f"sim-{TASK_ID[:8]}-2"


async def test_invalid_streams_in_full_but_fails_validation():
    run = await collect(simulated(), request("invalid"))
    assert run.error is None
    assert run.completed.finish_reason == "stop"
    assert run.text.strip()
    problems = validate_report(run.text, max_kb=200)
    assert problems
    assert any("level-1 heading" in p for p in problems)


async def test_unknown_scenario_is_a_permanent_rejection():
    run = await collect(simulated(), request("explode"))
    assert run.items == []
    assert run.error.error_type == "provider_rejected"
    assert run.error.retry is Retry.PERMANENT


async def test_token_rate_sets_the_pace():
    doc = SourceDocument("notes.txt", SAMPLE[:900])
    run = await collect(simulated(ttft_s=0, tokens_per_s=100), request(documents=(doc,)))
    assert 800 < len(run.text) < 3500
    tokens = len(run.deltas)
    assert run.end - START == pytest.approx((tokens - 1) / 100)


async def test_a_slow_rate_still_sends_a_heartbeat_every_second():
    run = await collect(simulated(ttft_s=2.5, tokens_per_s=0.4), request(), limit=12)
    gaps = [b - a for a, b in zip([START, *run.times], run.times, strict=False)]
    assert max(gaps) <= 1.0 + 1e-9
    assert any(isinstance(i, TextDelta) for i in run.items)


class CoarseClock(FakeClock):
    """Every sleep overshoots, like a busy event loop or a coarse timer."""

    sleeps = 0

    async def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        await super().sleep(seconds + 0.05)


async def test_oversleeping_is_caught_up_by_sending_due_tokens_together():
    clock = CoarseClock(START)
    provider = SimulatedProvider(clock=clock, ttft_s=0, tokens_per_s=200)
    run = await collect(provider, request())
    tokens = len(run.deltas)
    # Paced from one start time: the total stays tokens/rate, not tokens * (1/rate + 0.05).
    assert run.end - START == pytest.approx(tokens / 200, abs=0.1)
    assert clock.sleeps < tokens / 5
    assert run.text == write_report(DOCS, "")


async def test_output_cap_cuts_the_report_with_finish_reason_length():
    run = await collect(simulated(), request(max_output_tokens=50))
    assert len(run.deltas) == 50
    assert write_report(DOCS, "").startswith(run.text)
    assert run.completed.finish_reason == "length"


async def test_closing_mid_stream_stops_the_work():
    provider = simulated()
    stream = provider.stream(request())
    async for item in stream:
        if isinstance(item, TextDelta):
            break
    stopped_at = provider.clock.monotonic()
    await stream.aclose()
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    assert provider.clock.monotonic() == stopped_at


def test_bad_options_are_refused():
    with pytest.raises(ValueError):
        SimulatedProvider(tokens_per_s=0)


# --- get_provider --------------------------------------------------------------------------

PROVIDERS = {
    "simulated": {
        "BACKEND": "reports.providers.simulated.SimulatedProvider",
        "OPTIONS": {"ttft_s": 0.1, "tokens_per_s": 500},
    },
    "broken": {"BACKEND": "reports.providers.nowhere.Nothing"},
}


@pytest.fixture
def provider_settings(monkeypatch):
    # Patch the settings the module reads, so this works with or without pytest-django.
    fake = SimpleNamespace(REPORTS_PROVIDER="simulated", REPORTS_PROVIDERS=PROVIDERS)
    monkeypatch.setattr(reports.providers, "settings", fake)
    return fake


def test_get_provider_builds_the_configured_default(provider_settings):
    clock = FakeClock()
    provider = get_provider(clock=clock)
    assert isinstance(provider, SimulatedProvider)
    assert provider.name == "simulated"
    assert provider.clock is clock
    assert (provider.ttft_s, provider.tokens_per_s) == (0.1, 500)


def test_get_provider_by_name(provider_settings):
    provider_settings.REPORTS_PROVIDER = "broken"
    assert isinstance(get_provider("simulated"), SimulatedProvider)


@pytest.mark.parametrize("name", ["nope", "broken"])
def test_get_provider_unknown_or_unloadable_is_improperly_configured(provider_settings, name):
    with pytest.raises(ImproperlyConfigured):
        get_provider(name)


@pytest.mark.skipif(
    "DJANGO_SETTINGS_MODULE" not in os.environ, reason="needs the project's settings"
)
def test_project_settings_default_to_the_simulated_provider():
    assert isinstance(get_provider(), SimulatedProvider)


# --- profiles modelled on real providers ---------------------------------------------------


def gaps(run: Run) -> list[float]:
    times = [t for i, t in zip(run.items, run.times, strict=True) if isinstance(i, TextDelta)]
    return [b - a for a, b in itertools.pairwise(times)]


@pytest.mark.parametrize(
    ("profile", "ttft", "sizes", "gap"),
    [
        ("openai", (0.45, 0.45), (3, 5), (0.013, 0.020)),
        ("claude", (0.75, 2.0), (8, 20), (0.03, 0.06)),
        ("bursty", (0.45, 0.45), (150, 150), (0.5, 0.6)),
        ("stress", (0.45, 0.45), (3, 5), (0.004, 0.005)),
    ],
)
async def test_each_profile_streams_the_whole_report_at_its_pace(profile, ttft, sizes, gap):
    run = await collect(simulated(profile=profile, seed=7), request())
    assert run.text == write_report(DOCS, "")
    assert run.completed.finish_reason == "stop"
    assert ttft[0] - 1e-9 <= run.first_text_at() - START <= ttft[1] + 1e-9
    chunks = [len(d.text) for d in run.deltas]
    assert all(sizes[0] <= n <= sizes[1] for n in chunks[:-1])  # the last is what is left
    assert all(gap[0] - 1e-6 <= g <= gap[1] + 1e-6 for g in gaps(run))


async def test_a_profile_is_the_same_for_the_same_seed_and_differs_for_another():
    first = await collect(simulated(profile="claude", seed=1), request())
    again = await collect(simulated(profile="claude", seed=1), request())
    other = await collect(simulated(profile="claude", seed=2), request())
    assert [d.text for d in first.deltas] == [d.text for d in again.deltas]
    assert first.times == again.times
    assert first.times != other.times
    assert first.text == other.text  # only the pace differs, never the words


async def test_a_profile_keeps_the_scenarios():
    run = await collect(simulated(profile="stress"), request("truncated"))
    assert run.completed is None
    assert write_report(DOCS, "").startswith(run.text) and run.text


def test_an_unknown_profile_is_refused():
    with pytest.raises(ValueError, match="openai"):
        SimulatedProvider(profile="gpt-9")


MANUAL = """# Tidelog

Tidelog records the height of the tide in small harbours and predicts the next high water.
Harbour masters use its predictions to plan when boats can enter and leave the basin.
The predictions improve as the gauge collects more readings over the months.

Copyright 2024 The Tidelog Authors. Permission is granted to copy, distribute and modify
this manual under the terms of the GNU Free Documentation License, Version 1.3.

## Reading the gauge

The gauge measures the height of the water every minute and stores the readings on disk.
A reading that differs too much from its neighbours is treated as a wave and ignored.

## Function reference

```
int tl_read_gauge (tl_gauge *gauge, double *height) [Function]
```

Reads the current height of the water from the gauge into the height variable given.
Returns: TL_OK if a reading was taken, TL_NO_GAUGE if the gauge does not answer at all.
If the gauge is busy and this returns TL_BUSY, the caller should wait and try again later.

## Copying

This manual may be copied and changed by anyone for any purpose whatever it may be.
"""


def test_the_summary_leaves_out_licence_words_and_the_function_reference():
    report = write_report([SourceDocument("tidelog.md", MANUAL)], "")
    summary = report.split("## Summary\n\n", 1)[1].split("\n\n## ", 1)[0]

    assert "Tidelog records the height of the tide" in summary
    assert summary.count(". ") >= 2
    for aside in ("Permission", "Copyright", "Returns", "TL\\_BUSY", "Reads the current", "anyone"):
        assert aside not in summary, aside


GAUGES = """# Harbour gauges

Harbour gauges measure the height of the sea in small harbours.
It records the height of the sea in small harbours every single minute.
The harbour master reads the gauge before boats leave the basin.
Fishermen check the predicted height of the sea before they sail out.
Storms raise the height of the sea far above the predicted level.
Old gauges used a float in a well connected to the harbour.
Modern gauges send a radar pulse down to the water surface instead.
Batteries in remote gauges are charged by small solar panels.
Cables from the gauge run along the pier to the harbour office.
Readings are kept for ten years in the archive of the office.
Scientists use the archive to study how the sea level changes.
Volunteers repaint the gauge housing every spring before the season.
Children visiting the pier often ask what the white box is for.
A sign next to the housing now explains what the gauge does.
The sign was paid for by the local sailing club last year.
Visitors can see the latest reading on a screen in the office window.
The screen also shows the times of the next high and low water.
Seagulls sometimes sit on the radar housing and disturb the readings.
"""


def test_a_summary_sentence_stands_on_its_own_rather_than_leaning_on_the_one_before():
    report = write_report([SourceDocument("gauges.md", GAUGES)], "")
    summary = report.split("## Summary\n\n", 1)[1].split("\n\n## ", 1)[0]

    # "It records ..." is as central as the sentence before it, but read alone in a summary
    # its "It" points at nothing.
    assert summary.startswith("Harbour gauges measure the height of the sea")
    assert "It records" not in summary


async def test_each_purpose_streams_what_the_writer_writes_for_it():
    cut = tuple(passages.cut(DOCS, 400))
    notes = await collect(simulated(), request(purpose="notes", documents=(), passages=cut[:4]))
    assert notes.text == write_report((), "", purpose="notes", passages=cut[:4])
    assert notes.text.startswith("- ") and "[S" in notes.text
    report = await collect(simulated(), request(documents=(), notes=(notes.text,)))
    assert report.text == write_report((), "", notes=(notes.text,))
    assert validate_report(report.text, max_kb=200) == []
    cited = await collect(simulated(), request(passages=cut))
    assert cited.text == write_report(DOCS, "", passages=cut)
    # What the call reads is what it is billed for, passages and notes alike.
    assert notes.completed.usage.input_tokens >= sum(len(p.text) for p in cut[:4]) // 4
    assert report.completed.usage.input_tokens >= len(notes.text) // 4
