"""The plan of calls: one call when the whole prompt fits, else parts, rounds and a final call.

Pure: made from the passages, the instructions and how the provider counts tokens
(`Counting`), tested without a database. A part is a run of consecutive passages whose
notes prompt fits one call; every passage is in exactly one part, in order. Each notes
call writes at most `notes_tokens`, chosen so that the final call can hold every part's
notes; when it cannot even so, rounds combine the notes, each round's calls fitting, until
the final call can. More calls than `max_calls` (REPORTS_MAX_PARTS) is `TooLong`, before
any provider call. The plan is stored with the task (`as_json`) and read back by every
later attempt (`from_json`), so its parts never move under notes already written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from reports import wording
from reports.parsers.passages import Passage
from reports.providers import prompts
from reports.providers.fitting import TEMPLATE_TOKENS

PART, ROUND, FINAL = "part", "round", "final"
MIN_NOTES_TOKENS = 200  # notes shorter than this say too little to write a report from
NOTES_SHARE = 8  # notes of a part may use up to 1/8 of the input budget, when they fit
LABEL_CHARS = 300


@dataclass(frozen=True)
class Counting:
    """The window a plan must fit and how the provider counts its tokens."""

    context_tokens: int
    max_output_tokens: int
    chars_per_token: float
    max_calls: int

    def input_chars(self, output_tokens: int) -> int:
        """Return the characters of prompt a call with this output cap may send."""
        tokens = self.context_tokens - output_tokens - TEMPLATE_TOKENS
        return max(0, math.floor(tokens * self.chars_per_token))


@dataclass(frozen=True)
class Step:
    """One provider call of the plan."""

    key: str  # "part-3", "round-1-2", "final"; "report" for a plan of one call
    kind: str  # PART, ROUND or FINAL
    label: str  # what it reads, in words
    first: int | None = None  # a part's first and last passage numbers
    last: int | None = None
    reads: tuple[str, ...] = ()  # the notes a round or the final call reads, by key


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]  # in order: the parts, the rounds, the final call
    notes_tokens: int  # the output cap of each notes call
    report_tokens: int  # the output cap of the report's call

    @property
    def single(self) -> bool:
        return len(self.steps) == 1

    @property
    def total(self) -> int:
        return len(self.steps)

    @property
    def notes_steps(self) -> tuple[Step, ...]:
        return self.steps[:-1]

    @property
    def final(self) -> Step:
        return self.steps[-1]

    def counts(self) -> dict[str, int]:
        kinds = [step.kind for step in self.steps]
        return {"parts": kinds.count(PART), "rounds": kinds.count(ROUND), "calls": len(kinds)}

    def as_json(self) -> dict:
        return {
            **self.counts(),
            "notes_tokens": self.notes_tokens,
            "report_tokens": self.report_tokens,
            "steps": [
                [step.key, step.kind, step.label, step.first, step.last, list(step.reads)]
                for step in self.steps
            ],
        }

    @classmethod
    def from_json(cls, data: dict) -> Plan:
        steps = tuple(
            Step(key, kind, label, first, last, tuple(reads))
            for key, kind, label, first, last, reads in data["steps"]
        )
        return cls(steps, data["notes_tokens"], data["report_tokens"])


class TooLong(Exception):
    """The documents need more calls than a task may make; the message says what fits."""


def make(
    passages: Sequence[Passage],
    instructions: str,
    counting: Counting,
    read_by_ocr: Sequence[tuple[str, Sequence[int]]] = (),
) -> Plan:
    """Return the plan that reads every passage: one call when the whole prompt fits.

    `read_by_ocr` (the documents' pages read by OCR) is said in the report's prompt."""
    whole = prompts.frame_chars(prompts.REPORT, instructions, read_by_ocr) + sum(
        prompts.passage_chars(p) for p in passages
    )
    if whole <= counting.input_chars(counting.max_output_tokens):
        return Plan((Step("report", FINAL, "the whole input"),), 0, counting.max_output_tokens)
    final_room = _final_room(instructions, counting, read_by_ocr)
    notes = _notes_tokens(final_room, counting)
    parts = _parts(passages, instructions, counting, notes)
    # Shorter notes, when that lets the final call hold them all without a round.
    fitting_notes = _notes_tokens_for(final_room // len(parts), counting)
    if fitting_notes < notes and fitting_notes >= MIN_NOTES_TOKENS:
        notes = fitting_notes
        parts = _parts(passages, instructions, counting, notes)
    rounds, reads = _rounds(parts, instructions, counting, notes, final_room)
    steps = [*parts, *rounds, Step("final", FINAL, "the notes", reads=tuple(reads))]
    if len(steps) > counting.max_calls:
        raise TooLong(_too_long(passages, len(steps), counting.max_calls))
    return Plan(tuple(steps), notes, counting.max_output_tokens)


def sizes(counting: Counting) -> dict[str, int]:
    """Return, for a page to estimate a plan before any upload is read, the characters of
    documents one call reads whole (`call_chars`) and one part reads (`part_chars`), and
    the most calls a task may make (`max_calls`); without instructions, as `make` counts."""
    notes = _notes_tokens(_final_room("", counting), counting)
    return {
        "call_chars": counting.input_chars(counting.max_output_tokens)
        - prompts.frame_chars(prompts.REPORT, ""),
        "part_chars": counting.input_chars(notes) - prompts.frame_chars(prompts.NOTES, ""),
        "max_calls": counting.max_calls,
    }


def _final_room(
    instructions: str,
    counting: Counting,
    read_by_ocr: Sequence[tuple[str, Sequence[int]]] = (),
) -> int:
    """Return the characters of notes the final call may read."""
    return counting.input_chars(counting.max_output_tokens) - prompts.frame_chars(
        prompts.FINAL, instructions, read_by_ocr
    )


def _notes_tokens(final_room: int, counting: Counting) -> int:
    """Return a notes call's output cap: a share of what the final call reads."""
    return min(
        counting.max_output_tokens,
        max(MIN_NOTES_TOKENS, int(final_room / counting.chars_per_token) // NOTES_SHARE),
    )


def _note_chars(notes_tokens: int, counting: Counting) -> int:
    """Return the most characters one call's notes take in a later prompt."""
    return math.ceil(notes_tokens * counting.chars_per_token) + prompts.NOTE_FRAME_CHARS


def _notes_tokens_for(chars: int, counting: Counting) -> int:
    """Return the largest notes cap whose notes take at most `chars` in a later prompt."""
    return max(0, math.floor((chars - prompts.NOTE_FRAME_CHARS) / counting.chars_per_token))


def _parts(
    passages: Sequence[Passage], instructions: str, counting: Counting, notes_tokens: int
) -> list[Step]:
    """Group the passages, in order, into the fewest parts whose notes prompt fits."""
    room = counting.input_chars(notes_tokens) - prompts.frame_chars(prompts.NOTES, instructions)
    groups: list[list[Passage]] = []
    used = 0
    for passage in passages:
        size = prompts.passage_chars(passage)
        if size > room:
            raise TooLong(
                f"The model's context window is too small to read even one passage "
                f"({passage.id}, {len(passage.text):,} characters) with room for its notes."
            )
        if not groups or used + size > room:
            groups.append([])
            used = 0
        groups[-1].append(passage)
        used += size
    return [
        Step(f"part-{n}", PART, part_label(group), group[0].number, group[-1].number)
        for n, group in enumerate(groups, start=1)
    ]


def _rounds(
    parts: list[Step], instructions: str, counting: Counting, notes_tokens: int, final_room: int
) -> tuple[list[Step], list[str]]:
    """Return the rounds that combine the parts' notes until the final call holds them,
    and the keys of the notes the final call reads."""
    note = _note_chars(notes_tokens, counting)
    per_call = (
        counting.input_chars(notes_tokens) - prompts.frame_chars(prompts.COMBINE, instructions)
    ) // note
    level = [part.key for part in parts]
    steps: list[Step] = []
    number = 0
    while len(level) * note > final_room:
        if per_call < 2 or len(level) < 2:
            raise TooLong("The model's context window is too small to combine notes.")
        number += 1
        groups = [level[i : i + per_call] for i in range(0, len(level), per_call)]
        level = []
        for n, group in enumerate(groups, start=1):
            key = f"round-{number}-{n}"
            steps.append(Step(key, ROUND, f"notes {n} of {len(groups)}", reads=tuple(group)))
            level.append(key)
    return steps, level


def progress_label(plan: Plan, *steps: Step) -> str:
    """Say in words, in at most LABEL_CHARS, which calls of the plan are under way
    (wording.progress): one, or several of one level read side by side (parts, or one
    round's calls); none, between calls."""
    if not steps:
        return wording.BETWEEN_CALLS
    steps = tuple(sorted(steps, key=plan.steps.index))
    first = steps[0]
    round_number = _round_of(first) if first.kind == ROUND else 0
    level = [s for s in plan.steps if s.kind == first.kind and _round_of(s) == round_number]
    if any(step not in level for step in steps):
        raise ValueError("only calls of one level of the plan run side by side")
    return wording.progress(
        first.kind,
        [level.index(step) + 1 for step in steps],
        len(level),
        [step.label for step in steps],
        round_number=round_number,
        limit=LABEL_CHARS,
    )


def _round_of(step: Step) -> int:
    """Return the round a round's call belongs to ("round-2-3": 2); 0 for other calls."""
    return int(step.key.split("-")[1]) if step.kind == ROUND else 0


def part_label(passages: Sequence[Passage]) -> str:
    """Say in words what a part reads: its sections, else its pages, else its passages."""
    first, last = passages[0], passages[-1]
    sections = list(dict.fromkeys(p.section for p in passages if p.section))
    if sections:
        label = sections[0] if len(sections) == 1 else f"{sections[0]} to {sections[-1]}"
    elif first.page is not None and last.page is not None:
        same = first.page == last.page
        label = f"page {first.page}" if same else f"pages {first.page} to {last.page}"
    else:
        label = f"{first.id} to {last.id}" if first is not last else first.id
    documents = list(dict.fromkeys(p.document for p in passages))
    if len(documents) > 1:
        label = f"{label} ({documents[0]} to {documents[-1]})"
    return label[:LABEL_CHARS]


def _too_long(passages: Sequence[Passage], calls: int, max_calls: int) -> str:
    total = sum(len(p.text) for p in passages)
    fits = total * max_calls // calls
    pages = {(p.document, p.page) for p in passages if p.page is not None}
    amount = f"about {fits:,} characters"
    if pages:
        amount += f" (about {fits * len(pages) // total:,} pages)"
    return (
        f"The documents are too long to read whole: they hold {total:,} characters and need "
        f"{calls} calls of the model, and a report may make at most {max_calls}. "
        f"At most {amount} fit; split the input or ask an administrator to raise the limit."
    )
