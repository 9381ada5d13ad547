"""bench/repetition.py sends what it says it compares and records what the product would
do: each sampling setting's fields in every call of a report, and a report that loops
counted as the loop check stops it. Against the scripted server: no model is loaded."""

from __future__ import annotations

import asyncio

import pytest

from bench import repetition
from tests.providers.openai_server import Reply, local_provider_on_it

SAMPLING = {"repeat_penalty", "repeat_last_n", "dry_multiplier", "dry_base"}
SAMPLING |= {"dry_allowed_length", "seed"}


@pytest.fixture
def scripted(settings):
    with local_provider_on_it(settings, "SmolLM2-135M-Instruct.Q4_1") as scripted:
        yield scripted


def usage(completion: int) -> dict:
    return {"prompt_tokens": 600, "completion_tokens": completion, "total_tokens": 600}


async def measured(provider, sampled: dict, setting: str, seed: int) -> dict:
    document = repetition.documents(None)[1]  # the meeting notes
    request, passages = await repetition.request_of(provider, document)
    return await repetition.run_once(provider, sampled, request, passages, document, setting, seed)


async def test_a_settings_fields_and_its_seed_go_in_every_call_and_a_loop_is_not_valid(scripted):
    server, provider = scripted
    loop = ("The meeting is about the meeting room.\n- 14 October\n- ",) * 40  # 40 pieces
    server.queue(
        Reply(text=(" the boiler failed twice in September.",), usage=usage(9)),
        Reply(text=loop, usage=usage(480)),
    )
    sampled = repetition.sample_with(provider)
    run = await measured(provider, sampled, "dry", 7)
    summary, points = (request.body for request in server.requests[-2:])
    for body in (summary, points):
        assert (body["dry_multiplier"], body["dry_base"], body["dry_allowed_length"]) == (
            0.8,
            1.75,
            2,
        )
        assert body["seed"] == 7
        assert body["return_progress"] is True  # the provider's own fields are kept
        assert body["stop"] == ["\n\n", "\n#"]
    assert run["looped"] and not run["valid"]
    assert 0 < run["loop_at_chars"] < run["chars"]  # where the product would have stopped
    assert run["output_tokens"] == 489
    assert sampled == {}  # the next report sends its own fields alone


async def test_today_sends_the_providers_request_alone_and_a_finished_report_is_valid(scripted):
    server, provider = scripted
    server.queue(
        Reply(text=(" the boiler failed twice in September.",), usage=usage(9)),
        Reply(text=("A second quote is asked for.\n- Bicycle racks are full.",), usage=usage(12)),
    )
    run = await measured(provider, repetition.sample_with(provider), "today", 3)
    for request in server.requests[-2:]:
        assert SAMPLING & set(request.body) == {"seed"}
    assert (run["looped"], run["valid"], run["problems"]) == (False, True, [])
    assert run["text"].startswith("# Facilities committee, 14 October\n\n## Summary\n\nIn short,")
    assert run["source_words"] is not None and 0 < run["source_words"] <= 1


async def test_reports_written_at_once_each_send_their_own_settings_fields(scripted):
    # Two reports share the server's slots and the provider: neither's fields may reach
    # the other's calls, whichever call comes first.
    server, provider = scripted
    sampled = repetition.sample_with(provider)
    await asyncio.gather(
        measured(provider, sampled, "today", 3),
        measured(provider, sampled, "repeat", 5),
        measured(provider, sampled, "dry", 7),
    )
    fields = {3: set(), 5: {"repeat_penalty", "repeat_last_n"}}
    fields[7] = {"dry_multiplier", "dry_base", "dry_allowed_length"}
    calls = [request.body for request in server.requests if "messages" in request.body]
    assert sorted(body["seed"] for body in calls) == [3, 3, 5, 5, 7, 7]
    for body in calls:
        assert SAMPLING & set(body) == fields[body["seed"]] | {"seed"}
