"""The loop check alone: it stops a stream that keeps repeating itself, and nothing else.

Its false positives are measured on every document of the parser corpus and on the
simulated model's report of each (docs/providers-tested.md records the rate).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reports.parsers import parser_for
from reports.providers.base import SourceDocument
from reports.providers.report_writer import tokenize, write_report
from reports.worker.loops import NGRAM, QUIET, LoopCheck

CORPUS = Path(__file__).parent.parent / "fixtures" / "corpus"
DOCUMENTS = sorted(json.loads((CORPUS / "facts.json").read_text()))


def fired_after(text: str, pieces: list[str] | None = None) -> int | None:
    """Feed `text` as a stream (in the simulated model's tokens unless `pieces` are given);
    return how many characters had arrived when the check fired, or None."""
    check = LoopCheck()
    arrived = 0
    for piece in pieces if pieces is not None else tokenize(text):
        arrived += len(piece)
        if check.feed(piece):
            return arrived
    return None


INTRO = "# Report\n\n## Summary\n\nThe document describes a file format and its rules.\n\n"
LOOPS = {
    "a tag": "<pre><code>",
    "a sentence": "The file format is described in the document. ",
    "a paragraph": " ".join(f"word{i}" for i in range(120)) + ".\n\n",
    "a line of a list": "- The header is followed by the body.\n",
    "one character": "=",
}


def tokens_of(text: str) -> int:
    check = LoopCheck()
    check.feed(text + "\n")
    return check.tokens


@pytest.mark.parametrize("unit", LOOPS.values(), ids=LOOPS.keys())
def test_a_stream_that_repeats_itself_is_caught_within_a_few_hundred_tokens(unit):
    check = LoopCheck()
    check.feed(INTRO)
    rounds = 0
    while not check.feed(unit) and rounds < 20_000:
        rounds += 1
    assert check.looping
    # Caught once nothing new came for QUIET tokens and the unit came back a third time.
    caught_after = check.tokens - tokens_of(INTRO)
    assert caught_after <= QUIET + NGRAM + 2 * tokens_of(unit)
    assert rounds * len(unit) < 6_000  # characters: well before any output cap


def test_the_check_says_the_same_however_the_stream_is_cut():
    looped = INTRO + LOOPS["a sentence"] * 100
    whole = fired_after(looped, [looped])
    by_char = fired_after(looped, list(looped))
    in_sevens = fired_after(looped, [looped[i : i + 7] for i in range(0, len(looped), 7)])
    assert whole is not None
    # A piece is taken whole: the check fires in the piece where the same token completes.
    assert by_char == fired_after(looped, list(looped)) and by_char is not None
    assert in_sevens is not None and abs(in_sevens - by_char) < 7


def test_a_long_word_is_cut_into_the_same_tokens_however_it_arrives():
    text = "start " + "x" * 1_000 + " end "
    counts = set()
    for size in (len(text), 1, 7, 33):
        check = LoopCheck()
        for i in range(0, len(text), size):
            check.feed(text[i : i + size])
        counts.add(check.tokens)
    assert counts == {1 + 32 + 1}  # 1,000 characters: 31 tokens of 32, and one of 8


def test_a_report_quoting_a_passage_twice_is_not_a_loop():
    passage = " ".join(f"term{i}" for i in range(400)) + ".\n\n"
    assert fired_after(INTRO + passage + "## Details\n\n" + passage) is None


def test_a_markdown_table_with_repeated_cells_is_not_a_loop():
    header = "| Item | Linux | macOS | Windows | BSD | Android | iOS | Notes |\n"
    rule = "|" + "|".join(["------"] * 8) + "|\n"
    rows = "".join(
        f"| Item {i} | Yes | Yes | Yes | No | n/a | n/a | same as above |\n" for i in range(300)
    )
    assert fired_after(INTRO + header + rule + rows) is None


# --- the false-positive measurement --------------------------------------------------------


@pytest.mark.parametrize("name", DOCUMENTS)
def test_no_report_of_the_corpus_and_no_corpus_document_is_taken_for_a_loop(name):
    text = parser_for(name).extract((CORPUS / name).read_bytes())
    report = write_report([SourceDocument(name, text)], "")
    assert fired_after(report) is None  # the simulated model's report, as it streams
    assert fired_after(text) is None  # the document itself, read as if a model wrote it
    assert fired_after(text, [text[i : i + 400] for i in range(0, len(text), 400)]) is None
