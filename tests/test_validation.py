"""Report validity (docs/api.md): each rule on its own gives exactly one problem."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reports.parsers.passages import Passage
from reports.rendering import render_markdown
from reports.validation import settle_citations, validate_report
from reports.worker.quotes import cite_quotes

VALID = """# Quarterly review

## Summary

Sales rose in every region, led by the north.

## Key points

- Costs fell.
"""


def test_a_valid_report_has_no_problems():
    assert validate_report(VALID, max_kb=200) == []


def test_leading_blank_lines_and_a_lowercase_summary_are_fine():
    text = "\n  \n" + VALID.replace("## Summary", "## summary")
    assert validate_report(text, max_kb=200) == []


@pytest.mark.parametrize("text", ["", "   \n\t\n"])
def test_empty(text):
    assert validate_report(text, max_kb=200) == ["The report is empty."]


def test_lone_surrogate_is_not_utf8():
    problems = validate_report(VALID.replace("north", "north \ud800"), max_kb=200)
    assert len(problems) == 1
    assert "UTF-8" in problems[0]


def test_oversize():
    text = VALID.replace("led by the north.", "led by the north. " + "More detail. " * 200)
    assert len(text.encode()) > 2048
    problems = validate_report(text, max_kb=2)
    assert len(problems) == 1
    assert "limit is 2 KiB" in problems[0]
    assert validate_report(text, max_kb=3) == []


def test_size_counts_utf8_bytes_not_characters():
    text = VALID.replace("north.", "north. " + "é" * 1100)  # 1,100 characters, 2,200 bytes
    assert len(validate_report(text, max_kb=2)) == 1


@pytest.mark.parametrize(
    "text",
    [
        "Intro line.\n\n" + VALID,  # text before the title
        VALID.replace("# Quarterly review", "## Quarterly review"),  # not level 1
        VALID.replace("# Quarterly review", "Quarterly review\n================"),  # setext
        "[ref]: https://example.com\n" + VALID,  # a definition before the title
        "```\n# Quarterly review\n```\n" + VALID.split("\n", 1)[1],  # inside a code fence
    ],
    ids=["text-first", "level-2", "setext", "reference-first", "fenced"],
)
def test_must_begin_with_a_level_1_heading(text):
    problems = validate_report(text, max_kb=200)
    assert problems == ["The report does not begin with a level-1 heading (# Title)."]


def test_missing_summary():
    problems = validate_report(VALID.replace("## Summary", "## Overview"), max_kb=200)
    assert problems == ["The report has no “## Summary” section."]


def test_summary_inside_a_code_fence_does_not_count():
    text = VALID.replace(
        "## Summary\n\nSales rose in every region, led by the north.\n",
        "```\n## Summary\n\nSales rose.\n```\n",
    )
    assert validate_report(text, max_kb=200) == ["The report has no “## Summary” section."]


@pytest.mark.parametrize(
    "body", ["", "   \n\n", "### Details\n\nText under a sub-heading is not the summary's.\n"]
)
def test_summary_without_text(body):
    text = VALID.replace("Sales rose in every region, led by the north.\n", body)
    assert validate_report(text, max_kb=200) == ["The Summary section has no text."]


def test_no_other_level_2_section():
    text = VALID.replace("## Key points", "### Key points")
    assert validate_report(text, max_kb=200) == [
        "The report has no level-2 section besides the Summary."
    ]


def test_the_sources_list_reportline_adds_is_not_the_second_section():
    # Settled first, a report of a title and a Summary alone passed: the Sources list
    # appended to it counted as its second section.
    settled, _ = settle_citations(VALID.split("## Key points")[0], PASSAGES)
    assert validate_report(settled, max_kb=200) == [
        "The report has no level-2 section besides the Summary."
    ]


@pytest.mark.parametrize(
    "body", ["", "- 24\n- 32\n- 126 [S1]\n", "| 2024 | 2025 |\n|---|---|\n| 12 | 40 |\n"]
)
def test_a_second_section_of_no_words_does_not_count(body):
    # A small model's Key points, seen for real: "- 24", "- 32", "- 126" and on.
    settled, _ = settle_citations(VALID.replace("- Costs fell.\n", body), PASSAGES)
    assert validate_report(settled, max_kb=200) == [
        "No level-2 section besides the Summary has words in it, only numbers, symbols or "
        "citations."
    ]


def test_words_under_a_subheading_or_in_a_table_count():
    for body in (
        "### North\n\nCosts fell. [S1]\n",
        "| Region | Sales |\n|---|---|\n| North | 12 |\n",
    ):
        settled, _ = settle_citations(VALID.replace("- Costs fell.\n", body), PASSAGES)
        assert validate_report(settled, max_kb=200) == []


def test_several_problems_are_all_reported():
    problems = validate_report("Just some prose, no structure at all.", max_kb=200)
    assert len(problems) == 3


# --- citations (docs/api.md, "Passages, parts and citations") ----------------------------

PASSAGES = [
    Passage(1, "manual.pdf", "Encoding", 3, "DER encodes lengths."),
    Passage(2, "manual.pdf", None, 4, "A tag names a type."),
    Passage(3, "notes_*[x]*.md", "Chapter 4, *Encoding*", None, "Trees hold values."),
    Passage(4, "manual.pdf", None, None, "The end."),
]


def sources_of(report: str) -> list[str]:
    return report.split("\n## Sources\n\n", 1)[1].strip().splitlines()


def test_unknown_ids_are_removed_and_counted_and_valid_ones_kept():
    report = VALID.replace("north.", "north. [S1] Also [S9999], [S2, S12a, S3] and 【S3】 [S0].")
    settled, removed = settle_citations(report, PASSAGES)
    assert removed == 4  # S9999, S12a, 【S3】, S0
    assert "north. [S1] Also, [S2, S3] and." in settled
    assert validate_report(settled, max_kb=200) == []
    assert sources_of(settled) == [
        "- S1 — manual.pdf, Encoding",
        "- S2 — manual.pdf, page 4",
        "- S3 — notes\\_\\*\\[x\\]\\*.md, Chapter 4, \\*Encoding\\*",
    ]


def test_the_models_sources_section_is_replaced_and_other_sections_stay():
    report = VALID + "\n## Sources\n\n- S1 — made up\n- [S77]\n\n## Method\n\nCounted. [S4]\n"
    settled, removed = settle_citations(report, PASSAGES)
    assert "made up" not in settled and removed == 0
    assert "## Method\n\nCounted. [S4]" in settled
    assert settled.count("## Sources") == 1
    assert sources_of(settled) == ["- S4 — manual.pdf, its beginning"]


def test_ids_in_code_are_not_citations():
    report = (
        VALID
        + "\n## Code\n\nRun `x[S9999]` or ``a ` [S77]``.\n\n```\nv = w[S9999]\n```\n\n    [S88]\n"
    )
    settled, removed = settle_citations(report, PASSAGES)
    assert removed == 0
    for code in ["`x[S9999]`", "``a ` [S77]``", "v = w[S9999]", "    [S88]"]:
        assert code in settled
    assert sources_of(settled) == ["The report cites no passage."]


def test_a_lone_backtick_shields_nothing_beyond_its_paragraph():
    report = VALID.replace("north.", "north, ` alone.\n\nLater [S9999] and ``x`` [S1].")
    settled, removed = settle_citations(report, PASSAGES)
    assert removed == 1 and "Later and ``x`` [S1]." in settled


@pytest.mark.parametrize("end", ["```\ncode [S1]", "~~~~\ncode\n~~~", "```\n"])
def test_the_sources_section_never_lands_in_a_code_fence_left_open(end):
    settled, _ = settle_citations(VALID + "\n" + end, PASSAGES)
    assert settled.startswith(VALID + "\n" + end.rstrip("\n"))
    assert validate_report(settled, max_kb=200) == []
    assert "<h2>Sources</h2>" in render_markdown(settled)


def test_escaped_brackets_links_and_bracketed_words_are_not_citations():
    said = r"north \[S9999\] and [S9999](https://example.com) [sic] [Source] [S, T]."
    settled, removed = settle_citations(VALID.replace("north.", said), PASSAGES)
    assert removed == 0 and said in settled


_word = st.from_regex(r"[a-z]{1,8}", fullmatch=True)
_valid = st.lists(st.integers(1, len(PASSAGES)), min_size=1, max_size=3)
_invalid = st.one_of(
    st.integers(len(PASSAGES) + 1, 10**12).map(lambda n: f"S{n}"),
    st.sampled_from(["S0", "S12a", "S3b", "s2", "S01", "S1_2"]),
)


@st.composite
def _citation(draw) -> tuple[str, list[int], int]:
    """A citation as a model might write it: its text, its valid ids, its invalid count."""
    good = draw(_valid)
    bad = draw(st.lists(_invalid, max_size=3))
    ids = draw(st.permutations([f"S{n}" for n in good] + bad))
    separator = draw(st.sampled_from([", ", ",", "; ", " , "]))
    if draw(st.booleans()) and ids:
        # Invented brackets: nothing in them counts.
        return f"\u3010{separator.join(ids)}\u3011", [], len(ids)
    return f"[{separator.join(ids)}]", good, len(bad)


_code = st.from_regex(r"`[a-z ]{0,5}\[S[0-9]{1,3}\]`", fullmatch=True)
_piece = st.one_of(_word, _word, _citation(), _code)


@given(st.lists(_piece, min_size=1, max_size=30), st.lists(_piece, max_size=20))
def test_any_citation_soup_settles_to_known_ids_and_a_valid_report(summary, points):
    def text(pieces):
        return " ".join(p if isinstance(p, str) else p[0] for p in pieces)

    report = f"# Title\n\n## Summary\n\nWords {text(summary)}\n\n## Points\n\n- A {text(points)}\n"
    report += "\n```\n[S9999] [S1]\n```\n"
    cited = [p for p in summary + points if not isinstance(p, str)]
    settled, removed = settle_citations(report, PASSAGES)
    assert removed == sum(bad for _, _, bad in cited)
    assert validate_report(settled, max_kb=200) == []
    body, sources = settled.split("\n## Sources\n\n")
    remaining = re.findall(r"(?<![`\w])\[(S[^\]]*)\]", re.sub(r"`[^`]*`", "", body))
    assert {i for group in remaining for i in group.split(", ")} <= {"S1", "S2", "S3", "S4"}
    assert "```\n[S9999] [S1]\n```" in body
    for code in (p for p in summary + points if isinstance(p, str) and p.startswith("`")):
        assert code in body
    listed = re.findall(r"^- (S\d+) —", sources, flags=re.MULTILINE)
    assert listed == sorted(
        {f"S{n}" for _, good, _ in cited for n in good}, key=lambda i: int(i[1:])
    )
    # Settling twice changes nothing more.
    assert settle_citations(settled, PASSAGES) == (settled, 0)


# --- quotes cited (REPORTS_CITE_QUOTES; reports/worker/quotes.py) ----------------------

TIDES = [
    Passage(
        1,
        "tides.md",
        None,
        None,
        "Tidal energy is a predictable source of power. Small harbours see two tides a day, "
        "and the difference between high and low water can drive a turbine.",
    ),
    Passage(
        2,
        "tides.md",
        "Turbines",
        None,
        "Each turbine runs for eight hours on every tide and rests while the water turns.",
    ),
]
COPIED = (
    "In short, tidal energy is a predictable source of power. Small harbours see two tides "
    "a day, and the difference between high and low water can drive a turbine."
)


def tides_report(summary: str, points: str = "- Harbours are small.") -> str:
    return f"# Tides\n\n## Summary\n\n{summary}\n\n## Key points\n\n{points}\n"


def test_a_copied_sentence_gets_its_passages_citation_and_sources_list_it():
    report, added = cite_quotes(tides_report(COPIED), TIDES)
    assert added == 2
    assert report == tides_report(
        "In short, tidal energy is a predictable source of power. [S1] Small harbours see two "
        "tides a day, and the difference between high and low water can drive a turbine. [S1]"
    )
    settled, removed = settle_citations(report, TIDES)
    assert removed == 0 and sources_of(settled) == ["- S1 — tides.md, its beginning"]


@pytest.mark.parametrize(
    ("sentence", "cited"),
    [
        ("Each turbine runs for eight hours on every tide and rests while the water turns.", 1),
        # A lead of at most a fifth of the words is the writer's: 3 of 18.
        ("At most sites, each turbine runs for eight hours on every tide and rests while the "
         "water turns.", 1),
        # A word changed in the lead is let through, unless it is a figure.
        ("One turbine runs for eight hours on every tide and rests while the water turns.", 1),
        ("At 3 sites, each turbine runs for eight hours on every tide and rests while the "
         "water turns.", 0),
        # A figure changed, a last word changed, a clause added: the passage did not say it.
        ("Each turbine runs for 24 hours on every tide and rests while the water turns.", 0),
        ("Each turbine runs for eight hours on every tide and rests while the water rises.", 0),
        ("Each turbine runs for eight hours on every tide and rests while the water turns, "
         "which is why it lasts.", 0),
        # A lead of more than a fifth: 2 of 8.
        ("In short, tidal energy is a predictable source.", 0),
        # 6 words (1 of them a lead) are enough, 5 too few.
        ("It rests while the water turns.", 1),
        ("Rests while the water turns.", 0),
        # Said in other words.
        ("Harbours get steady power from the tides, which rise and fall twice a day.", 0),
    ],
)  # fmt: skip
def test_a_sentence_is_cited_when_all_but_its_lead_is_one_run_of_the_passage(sentence, cited):
    report, added = cite_quotes(tides_report(sentence), TIDES)
    assert added == cited
    assert report == tides_report(f"{sentence} [S2]" if cited else sentence)


def test_a_sentence_that_cites_keeps_its_own_citation():
    said = COPIED.replace("power.", "power [S2].").replace("turbine.", "turbine.\n[S2]")
    assert cite_quotes(tides_report(said), TIDES) == (tides_report(said), 0)


def test_the_longest_run_wins_and_among_equals_the_first_passage():
    whole = "In short, tidal energy is a predictable source of power."
    passages = [
        *TIDES,
        Passage(3, "b.md", None, None, whole),
        Passage(4, "c.md", None, None, whole),
    ]
    report, added = cite_quotes(tides_report(whole), passages)
    assert added == 1 and f"{whole} [S3]" in report


def test_headings_code_tables_and_sources_are_left_as_they_are():
    quote = "Tidal energy is a predictable source of power."
    report = (
        f"# {quote}\n\n## Summary\n\n{quote}\n\n> - *{quote}*\n\n```\n{quote}\n```\n\n"
        f"    {quote}\n\n| Quote |\n| --- |\n| {quote} |\n\n## Sources\n\n- {quote}\n"
    )
    cited, added = cite_quotes(report, TIDES)
    assert added == 2
    assert cited == report.replace(f"\n{quote}\n\n>", f"\n{quote} [S1]\n\n>").replace(
        f"*{quote}*", f"*{quote}* [S1]"
    )
