"""The plan of calls, pure: every passage in exactly one part, in order, every call within
its window, and a plan over the calls allowed refused with what fits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.parsers import planning
from reports.parsers.passages import Passage
from reports.providers import prompts
from reports.providers.base import GenerationRequest, SourceDocument
from reports.providers.prompts import build_messages
from reports.worker.plan_store import TaskInput, ocr_pages_of, request_for

TASK = TaskInput("t", 1, "Focus on the encoding rules.", "ok")


def passage(number: int, chars: int, section: str | None = None, page=None) -> Passage:
    return Passage(number, "manual.pdf", section, page, ("word " * chars)[:chars])


def prompt_chars(request: GenerationRequest) -> int:
    return sum(len(m["content"]) for m in build_messages(request))


passage_lists = st.lists(
    st.tuples(st.integers(1, 1500), st.sampled_from([None, "Encoding", "Decoding"])),
    min_size=1,
    max_size=120,
).map(lambda specs: [passage(n, c, s, n // 3 + 1) for n, (c, s) in enumerate(specs, start=1)])


@settings(max_examples=60, deadline=None)
@given(
    passages=passage_lists,
    context=st.integers(3_000, 40_000),
    output=st.integers(500, 2_000),
    chars_per_token=st.sampled_from([1.0, 2.5, 3.0]),
    scanned=st.lists(st.integers(1, 200), max_size=40),
)
def test_every_passage_is_in_one_part_in_order_and_every_call_fits(
    passages, context, output, chars_per_token, scanned
):
    counting = planning.Counting(context, output, chars_per_token, max_calls=10_000)
    # The report's call also says which pages were read by OCR.
    documents = (SourceDocument("manual.pdf", "", ocr_pages=tuple(sorted(set(scanned)))),)
    try:
        plan = planning.make(passages, TASK.instructions, counting, ocr_pages_of(documents))
    except planning.TooLong:
        return  # a window too small for one passage and its notes
    if plan.single:
        request = request_for(TASK, plan.final, plan, passages, {}, documents)
        assert prompt_chars(request) <= counting.input_chars(output)
        return
    parts = [step for step in plan.steps if step.kind == planning.PART]
    covered = [n for part in parts for n in range(part.first, part.last + 1)]
    assert covered == [p.number for p in passages]
    for part in parts:
        request = request_for(TASK, part, plan, passages, {})
        assert prompt_chars(request) <= counting.input_chars(plan.notes_tokens)
    # The notes at their longest fit every call that reads them.
    longest = "x" * int(plan.notes_tokens * chars_per_token)
    notes = {step.key: longest for step in plan.steps}
    for step in plan.steps:
        if step.kind != planning.PART:
            request = request_for(TASK, step, plan, passages, notes, documents)
            assert prompt_chars(request) <= counting.input_chars(request.max_output_tokens)
    read = [key for step in plan.steps for key in step.reads]
    assert sorted(read) == sorted(step.key for step in plan.notes_steps)  # each read once
    assert planning.Plan.from_json(plan.as_json()) == plan


def test_a_prompt_that_fits_only_without_the_ocr_note_is_not_one_call():
    passages = [passage(n, 1000, None, n) for n in range(1, 4)]
    documents = (SourceDocument("manual.pdf", "", ocr_pages=(1, 2, 3)),)
    whole = prompts.frame_chars(prompts.REPORT, TASK.instructions) + sum(
        prompts.passage_chars(p) for p in passages
    )
    # A window the documents fill to the last character, without the note.
    counting = planning.Counting(whole + 1_024 + planning.TEMPLATE_TOKENS, 1_024, 1.0, 64)
    assert planning.make(passages, TASK.instructions, counting).single

    plan = planning.make(passages, TASK.instructions, counting, ocr_pages_of(documents))
    assert not plan.single
    longest = "x" * plan.notes_tokens
    notes = {step.key: longest for step in plan.steps}
    request = request_for(TASK, plan.final, plan, passages, notes, documents)
    assert prompt_chars(request) <= counting.input_chars(request.max_output_tokens)


def test_a_part_is_labelled_by_its_sections_else_its_pages():
    passages = [passage(1, 10, "Chapter 4, Encoding"), passage(2, 10, "Chapter 4, Encoding")]
    assert planning.part_label(passages) == "Chapter 4, Encoding"
    assert planning.part_label([passage(1, 10, None, 3), passage(2, 10, None, 5)]) == "pages 3 to 5"


def labelled_plan(labels: list[str]) -> planning.Plan:
    """A plan of these parts, one round of three calls on their notes, and the report."""
    parts = [
        planning.Step(f"part-{n}", planning.PART, label, n, n)
        for n, label in enumerate(labels, start=1)
    ]
    rounds = [
        planning.Step(f"round-1-{n}", planning.ROUND, f"notes {n} of 3", reads=("part-1",))
        for n in range(1, 4)
    ]
    final = planning.Step("final", planning.FINAL, "the notes", reads=("round-1-1",))
    return planning.Plan((*parts, *rounds, final), 200, 1_000)


def test_the_progress_label_names_every_call_under_way():
    plan = labelled_plan([f"Chapter {n}" for n in range(1, 6)])
    part = {n: plan.steps[n - 1] for n in range(1, 6)}
    label = planning.progress_label
    assert label(plan, part[3]) == "Reading part 3 of 5: Chapter 3"
    # Side by side, in the plan's order whatever order they began in.
    assert label(plan, part[3], part[2]) == "Reading parts 2 and 3 of 5: Chapter 2; Chapter 3"
    assert label(plan, part[2], part[3], part[5]) == (
        "Reading parts 2, 3 and 5 of 5: Chapter 2; Chapter 3; Chapter 5"
    )
    first, second, third = plan.steps[5:8]
    assert label(plan, second) == "Combining notes, round 1: notes 2 of 3"
    assert label(plan, third, first) == "Combining notes, round 1: notes 1 and 3 of 3"
    assert label(plan, plan.final) == "Writing the report from the notes"
    assert label(plan) == "Starting the next call"  # one call ended, none under way
    with pytest.raises(ValueError):
        label(plan, part[5], first)


def test_the_progress_label_keeps_to_its_length_whatever_the_parts_read():
    plan = labelled_plan(["A chapter with a long title " * 12, "Another, as long " * 12, "x"])
    one, two, three = plan.steps[:3]
    alone = planning.progress_label(plan, one)
    assert alone.startswith("Reading part 1 of 3: A chapter with a long title")
    assert len(alone) == planning.LABEL_CHARS and alone.endswith("\u2026")
    # Two parts whose labels do not fit together are named by their numbers alone.
    assert planning.progress_label(plan, two, one) == "Reading parts 1 and 2 of 3"
    assert planning.progress_label(plan, two, three).startswith("Reading parts 2 and 3 of 3: ")
    many = labelled_plan([f"Part {n}" for n in range(1, 121)])
    under_way = many.steps[:100]
    assert planning.progress_label(many, *under_way) == "Reading 100 of the 120 parts"
    for labels in (under_way[:2], under_way[:10], under_way[:60], under_way[:1]):
        assert len(planning.progress_label(many, *labels)) <= planning.LABEL_CHARS


def test_too_many_calls_are_refused_saying_how_much_fits():
    passages = [passage(n, 1400, None, n) for n in range(1, 200)]
    counting = planning.Counting(4_096, 1_024, 3.0, max_calls=8)
    with pytest.raises(planning.TooLong) as refused:
        planning.make(passages, "", counting)
    message = str(refused.value)
    assert "at most 8" in message and "characters" in message and "pages" in message


@pytest.mark.parametrize("count", [10, 60, 300])
def test_the_upload_forms_sizes_tell_the_parts_make_will_cut(count):
    counting = planning.Counting(20_000, 2_000, 3.0, 64)
    sizes = planning.sizes(counting)
    passages = [passage(n, 1_000) for n in range(1, count + 1)]
    plan = planning.make(passages, "", counting)
    chars = sum(len(p.text) for p in passages)
    assert plan.single == (chars <= sizes["call_chars"])
    if not plan.single:
        parts = -(-chars // sizes["part_chars"])
        assert plan.counts()["parts"] in (parts, parts + 1)  # each passage's label adds a little
