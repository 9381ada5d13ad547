"""The extractive report: real content from the documents, always a valid report."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reports.parsers import passages
from reports.parsers.passages import Passage
from reports.providers.base import SourceDocument
from reports.providers.report_writer import NOTES_COMBINED, NOTES_PER_PART, write_report
from reports.rendering import render_markdown
from reports.validation import settle_citations, validate_report

SAMPLE = (Path(__file__).parent.parent / "fixtures" / "sample_article.md").read_text()
ARTICLE = SourceDocument("sample_article.md", SAMPLE)
HEADINGS = [
    "Street Trees and the Urban Heat Island",
    "Why the heat matters",
    "How street trees cool a city",
    "Planning and maintenance",
    "Conclusion",
]


def sections(report: str) -> dict[str, str]:
    """Split a report into its level-2 sections, by name."""
    parts = re.split(r"^## (.+)$", report, flags=re.MULTILINE)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def flat(text: str) -> str:
    return " ".join(text.split())


def test_article_report_has_every_section_from_the_text():
    report = write_report([ARTICLE], "")
    assert validate_report(report, max_kb=200) == []
    assert report.startswith("# Street Trees and the Urban Heat Island\n")
    parts = sections(report)
    assert list(parts) == ["Summary", "Key points", "Key terms", "Document structure"]

    source = flat(SAMPLE)
    summary = re.split(r"(?<=\.) ", parts["Summary"])
    assert 3 <= len(summary) <= 5
    assert all(sentence in source for sentence in summary)

    points = [line.removeprefix("- ") for line in parts["Key points"].splitlines()]
    assert points
    for point in points:
        sentence = re.sub(r"^\*\*.+?:\*\* ", "", point)
        assert sentence in source
        assert sentence not in summary

    terms = parts["Key terms"]
    assert "| Term | Count |" in terms
    assert "| heat |" in terms
    assert "| trees |" in terms
    assert "| the |" not in terms  # stop words are not terms

    structure = parts["Document structure"]
    assert "sample\\_article.md" in structure
    assert re.search(r"\d{3} words, 7 paragraphs, 4 headings", structure)
    assert f"- {HEADINGS[0]}" not in structure  # the title is no section of itself
    for heading in HEADINGS[1:]:
        assert f"\n  - {heading}" in structure
    assert "## Your instructions" not in report


def test_the_same_input_gives_the_same_report():
    assert write_report([ARTICLE], "costs") == write_report([ARTICLE], "costs")


def test_a_one_line_document():
    report = write_report([SourceDocument("note.txt", "Budgets are due on Friday.")], "")
    assert validate_report(report, max_kb=200) == []
    # A sentence is no title: the file name is, as a title.
    assert report.startswith("# Note\n")
    assert "Budgets are due on Friday." in sections(report)["Summary"]


def test_without_a_heading_the_title_is_the_first_line_when_it_reads_like_one():
    source = "HARBOUR TIDES EXPLAINED\n\nThe tide turns twice a day.\n\nMore here."
    report = write_report([SourceDocument("long.txt", source)], "")
    assert report.splitlines()[0] == "# HARBOUR TIDES EXPLAINED"


@pytest.mark.parametrize(
    "first",
    [
        # GPL-3's centred title aside, its first unfinished line is in its terms.
        "keep intact all notices stating that this License and any",
        "This opening line runs on " + "and on " * 30 + "until it ends.",
    ],
)
def test_a_line_that_is_no_title_leaves_the_title_to_the_file_name(first: str):
    source = f"{first}\n\nHarbour Tides Explained\n\nMore here."
    report = write_report([SourceDocument("harbour_tides-2024.txt", source)], "")
    assert report.splitlines()[0] == "# Harbour tides-2024"


def test_a_long_title_is_cut_short():
    report = write_report([SourceDocument("long.md", "# " + "Harbour " * 30 + "\n\nText.")], "")
    title = report.splitlines()[0].removeprefix("# ")
    assert title.startswith("Harbour Harbour")
    assert title.endswith("…")
    assert len(title) <= 81


def test_two_documents():
    other = SourceDocument(
        "budget.txt",
        "Council budget 2025\n\nThe council will spend more on parks. Tree planting costs rise.",
    )
    report = write_report([ARTICLE, other], "")
    assert validate_report(report, max_kb=200) == []
    title = report.splitlines()[0]
    assert title == "# Analysis of 2 documents: Street Trees and the Urban Heat Island; budget.txt"
    assert len(title) <= 2 + 81
    structure = sections(report)["Document structure"]
    assert "**sample\\_article.md**" in structure
    assert "**budget.txt**" in structure
    assert "no headings" in structure


def test_instructions_are_quoted_and_shape_the_summary():
    instructions = "Focus on hospital admissions and older residents."
    plain = sections(write_report([ARTICLE], ""))["Summary"]
    report = write_report([ARTICLE], instructions)
    assert validate_report(report, max_kb=200) == []
    parts = sections(report)
    assert "hospital admissions" not in plain
    assert "hospital admissions rise sharply" in parts["Summary"]
    quoted = parts["Your instructions"]
    assert f"```text\n{instructions}\n```" in quoted
    assert "ranked higher" in quoted
    assert "hospital" in quoted


def test_instructions_with_markdown_stay_plain_text():
    instructions = "# Not a heading\n```\n## Summary\n```\n<script>x</script>"
    report = write_report([ARTICLE], instructions)
    assert validate_report(report, max_kb=200) == []
    assert len(re.findall(r"^## Summary$", report, flags=re.MULTILINE)) == 2  # a regex sees two…
    html = render_markdown(report)
    assert html.count("<h2>Summary</h2>") == 1  # …but Markdown does not
    assert "<h1>Not a heading</h1>" not in html
    assert "<script>" not in html


def test_markdown_in_the_source_cannot_break_the_report_structure():
    source = (
        "Reading list\n\n"
        "- The # of Chapter one would start a heading and should stay text here.\n"
        "- 1986. The year the plant closed, which nobody in the town forgot.\n"
        "- Links like [click](javascript:alert(1)) and <script>alert(1)</script> stay text.\n"
        "- A pipe | in the middle, a *star*, and an _underscore_ should not format anything.\n"
        "- &amp; entities and `code spans` are shown literally in the report text.\n"
    )
    report = write_report([SourceDocument("list*.md", source)], "")
    assert validate_report(report, max_kb=200) == []
    html = render_markdown(report)
    assert html.count("<h1>") == 1
    assert html.count("<h2>") == 4
    assert "<script>" not in html
    assert "javascript:" not in re.sub(r">[^<]*<", "><", html)  # not in any tag
    assert "<em>" not in html and "<code>" not in html
    assert "The # of Chapter one" in html


def test_heading_levels_nest_without_turning_into_code():
    source = "# Top\n\nText here.\n\n#### Deep\n\nMore text.\n\n## Middle\n\nEnd text."
    report = write_report([SourceDocument("levels.md", source)], "")
    structure = sections(report)["Document structure"]
    assert report.startswith("# Top\n")
    assert "2 headings\n  - Deep\n  - Middle" in structure
    assert "<pre>" not in render_markdown(report)


def test_text_in_code_fences_is_not_summarised_and_hashes_there_are_not_headings():
    source = "# Guide\n\n```\n# not a heading\nprint('secret code sentence here.')\n```\n\nRun it."
    report = write_report([SourceDocument("guide.md", source)], "")
    assert "secret code" not in report
    assert "not a heading" not in report
    assert report.startswith("# Guide\n")
    assert "no headings" in report


def test_a_200k_character_document_completes():
    text = (SAMPLE + "\n\n") * (200_000 // len(SAMPLE) + 1)
    report = write_report([SourceDocument("big.md", text[:200_000])], "heat")
    assert validate_report(report, max_kb=200) == []
    assert len(report) < 20_000


def test_headings_and_names_are_written_as_they_were_without_needless_escapes():
    source = "# Quarterly review\n\n" + "\n\n".join(
        f"## {n}. {heading}\n\n{text}"
        for n, (heading, text) in enumerate(
            [
                (
                    "Summary",
                    "Revenue grew in the third quarter as plan #2 sold well. "
                    "Sales of the small plan fell for the second quarter running.",
                ),
                (
                    "Costs",
                    "Hosting costs rose by a fifth after the data centre moved. "
                    "Salaries stayed flat because no team grew this quarter.",
                ),
                (
                    "Outlook",
                    "The board expects steady growth while the market stays calm. "
                    "A price change is planned for the spring if demand holds.",
                ),
            ],
            start=1,
        )
    )
    report = write_report([SourceDocument("Q3 #2 review.md", source)], "")
    assert validate_report(report, max_kb=200) == []
    points = sections(report)["Key points"]
    assert re.search(r"\*\*\d\. (Summary|Costs|Outlook):\*\*", points), points
    structure = sections(report)["Document structure"]
    # Text that needs no escape inside a line is written as it was ("1\\. Summary", "\\#2")…
    assert "\\" not in report.replace(structure, "")
    assert "**Q3 #2 review.md**" in structure
    # …but a list item that starts with "1." would be a list of its own: that one stays escaped.
    assert "- 1\\. Summary" in structure
    assert "<ol>" not in render_markdown(report)


def test_one_huge_sentence_is_cut_in_the_report():
    report = write_report([SourceDocument("run-on.txt", "word " * 40_000)], "")
    assert validate_report(report, max_kb=200) == []
    assert len(report) < 5_000


def test_lone_surrogates_do_not_reach_the_report():
    report = write_report([SourceDocument("bad\ud800.txt", "Broken \udc00 text here.")], "\ud83d")
    report.encode("utf-8")
    assert validate_report(report, max_kb=200) == []


_chars = st.one_of(
    st.characters(exclude_categories=("Cs", "Cc", "Co", "Cn")),
    st.sampled_from("\n\n\t #*-_`~>[]()!|<&=+.1\\"),
)
_texts = st.text(_chars, min_size=1, max_size=400).filter(lambda t: re.search(r"\w", t))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(_texts, min_size=1, max_size=3),
    name=st.text(_chars, max_size=20),
    instructions=st.text(_chars, max_size=80),
)
def test_any_text_with_a_word_gives_a_valid_report(texts, name, instructions):
    docs = [SourceDocument(name, text) for text in texts]
    report = write_report(docs, instructions)
    assert validate_report(report, max_kb=200) == []
    html = render_markdown(report)
    assert html.startswith("<h1>")
    assert html.count("<h2>") == (5 if instructions.strip() else 4)


def _said(sentence: str) -> str:
    return re.sub(r"[\s\-]+", "", sentence.casefold())


def test_a_sentence_hyphenated_two_ways_is_said_once():
    # A two-column layout repeats a passage; one copy's line break dropped the hyphen.
    source = (
        "# Choosing a database\n\n"
        "## Small sites\n\n"
        "A small website runs well on an embedded database file.\n\n"
        "## Busy sites\n\n"
        "Busy websites should use an enterprise-class client/server database engine.\n\n"
        "## Reprint\n\n"
        "Busy websites should use an enterpriseclass client/server database engine.\n\n"
        "## Backups\n\n"
        "Every database needs backups that somebody has restored at least once.\n"
    )
    parts = sections(write_report([SourceDocument("sites.md", source)], ""))
    summary = re.split(r"(?<=\.) ", parts["Summary"])
    points = [re.sub(r"^- \*\*.+?:\*\* ", "", line) for line in parts["Key points"].splitlines()]
    said = [_said(sentence) for sentence in summary + points]

    assert sum("busywebsites" in sentence for sentence in said) == 1
    assert len(said) == len(set(said))


def test_key_terms_are_listed_by_count():
    # "garden" is said most but in every paragraph; "compost" less, in fewer, so it weighs more.
    paragraphs = [
        "The garden compost heap needs turning. Compost warms the garden compost bin.",
        "The garden compost heap needs water. Compost feeds the garden.",
        "The garden beds need weeding in the garden.",
        "The garden paths need sweeping.",
    ]
    report = write_report([SourceDocument("garden.txt", "\n\n".join(paragraphs))], "")
    rows = re.findall(r"^\| (\w+) \| (\d+) \|$", sections(report)["Key terms"], re.MULTILINE)
    counts = [int(count) for _term, count in rows]

    assert [term for term, _count in rows][:2] == ["garden", "compost"]
    assert counts == sorted(counts, reverse=True)


def test_the_summary_draws_on_the_chapters_that_explain_more_than_on_an_api_reference():
    parts = ["cipher", "hash", "mac", "random", "stream", "block"]
    reference = "".join(
        f"### Widget {part} functions\n\n"
        f"Each {part} widget keeps its widget state in a widget context that the widget "
        "functions share.\n\n"
        f"```\nint widget_{part}_open(struct widget_ctx *ctx);\n```\n\n"
        f"Opens the {part} widget and returns zero when the widget context is not ready.\n\n"
        for part in parts
    )
    source = (
        "# Widget Library\n\n## Introduction\n\n"
        "This library gives programs small reusable widgets to assemble larger interfaces "
        "from. It keeps every widget small, so that programs built on it stay easy to read. "
        "Programs combine these widgets with their own code to build whole applications.\n\n"
        "## Reference\n\n" + reference
    )
    summary = sections(write_report([SourceDocument("widgets.md", source)], ""))["Summary"]
    introduction = source.split("## Reference")[0]
    sentences = re.split(r"(?<=\.) ", summary)

    explained = [sentence for sentence in sentences if sentence in flat(introduction)]
    assert len(explained) > len(sentences) / 2, summary


# --- citations (docs/api.md, "Passages, parts and citations") ----------------------------

_CITED = re.compile(r" \[(S\d+(?:, S\d+)*)\]")
_LABEL = re.compile(r"^\*\*(?:\\.|[^*\\])*:\*\* ")
_DECORATION = re.compile(r"^\s*(?:>\s*)*(?:[-*+]\s+|\d{1,9}[.)]\s+)?", re.MULTILINE)


def statements(text: str) -> list[tuple[str, list[str]]]:
    """Return each cited statement of a report's text, as plain text, with its ids."""
    found = []
    start = 0
    for match in _CITED.finditer(text):
        said = text[start : match.start()].strip()
        said = _LABEL.sub("", re.sub(r"^- ", "", said))
        said = re.sub(r"\\(.)", r"\1", said).removesuffix("…")
        found.append((flat(said), match.group(1).split(", ")))
        start = match.end()
    return found


def undecorated(text: str) -> str:
    """A passage's text as its sentences read: no list or quote marks, one line."""
    return flat(_DECORATION.sub("", text))


def assert_each_statement_is_in_its_passage(text: str, passages: list[Passage]) -> int:
    by_id = {p.id: p for p in passages}
    said = statements(text)
    for sentence, ids in said:
        assert sentence, text
        assert any(sentence in undecorated(by_id[i].text) for i in ids), (sentence, ids)
    return len(said)


def test_a_report_of_passages_cites_the_passage_each_sentence_comes_from():
    cut = passages.cut([ARTICLE], 400)
    report = write_report([ARTICLE], "", passages=cut)
    parts = sections(report)
    # Every summary sentence, and every key point, ends with its citation.
    summary = parts["Summary"]
    assert re.fullmatch(r"(?:\S.*? \[S\d+\] ?)+", summary), summary
    assert assert_each_statement_is_in_its_passage(summary, cut) >= 3
    points = parts["Key points"].splitlines()
    assert all(_CITED.search(line) for line in points)
    assert assert_each_statement_is_in_its_passage(parts["Key points"], cut) == len(points)
    assert validate_report(report, max_kb=200) == []
    settled, removed = settle_citations(report, cut)
    assert removed == 0 and validate_report(settled, max_kb=200) == []


def test_without_passages_a_report_cites_nothing():
    assert "[S" not in write_report([ARTICLE], "")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_texts, min_size=1, max_size=3), size=st.integers(40, 400))
def test_any_report_of_passages_cites_only_passages_that_hold_its_sentences(texts, size):
    docs = [SourceDocument(f"doc{i}.md", text) for i, text in enumerate(texts)]
    cut = passages.cut(docs, size)
    report = write_report(docs, "", passages=cut)
    assert validate_report(report, max_kb=200) == []
    parts = sections(report)
    assert_each_statement_is_in_its_passage(parts["Summary"], cut)
    assert_each_statement_is_in_its_passage(parts["Key points"], cut)
    assert settle_citations(report, cut)[1] == 0


def test_notes_on_a_part_are_its_central_sentences_each_citing_its_passage():
    cut = passages.cut([ARTICLE], 400)
    part = cut[len(cut) // 3 : 2 * len(cut) // 3]
    notes = write_report([], "", purpose="notes", passages=part)
    bullets = notes.splitlines()
    assert 1 <= len(bullets) <= NOTES_PER_PART
    assert all(line.startswith("- ") for line in bullets)
    assert assert_each_statement_is_in_its_passage(notes, part) == len(bullets)
    # Only the part's passages are cited.
    assert {i for _, ids in statements(notes) for i in ids} <= {p.id for p in part}
    # The most central first: the first note is a sentence the part's own report summarises.
    summary = sections(write_report([], "", passages=part))["Summary"]
    assert bullets[0].removeprefix("- ") in summary


def test_combined_notes_keep_the_most_central_bullets_with_their_citations():
    cut = passages.cut([ARTICLE], 300)
    thirds = [
        cut[: len(cut) // 3],
        cut[len(cut) // 3 : 2 * len(cut) // 3],
        cut[2 * len(cut) // 3 :],
    ]
    notes = [write_report([], "", purpose="notes", passages=part) for part in thirds]
    combined = write_report([], "", purpose="combine", notes=notes)
    bullets = combined.splitlines()
    assert 1 <= len(bullets) <= NOTES_COMBINED
    given_bullets = {line for text in notes for line in text.splitlines()}
    assert set(bullets) <= given_bullets
    assert_each_statement_is_in_its_passage(combined, cut)


def test_a_report_from_notes_keeps_their_citations_and_is_valid():
    cut = passages.cut([ARTICLE], 300)
    halves = [cut[: len(cut) // 2], cut[len(cut) // 2 :]]
    notes = [write_report([], "", purpose="notes", passages=part) for part in halves]
    report = write_report([ARTICLE], "", notes=notes)
    assert validate_report(report, max_kb=200) == []
    assert report.startswith("# Sample article\n")
    parts = sections(report)
    assert assert_each_statement_is_in_its_passage(parts["Summary"], cut) >= 3
    assert_each_statement_is_in_its_passage(parts["Key points"], cut)
    settled, removed = settle_citations(report, cut)
    assert removed == 0 and "## Sources" in settled


HARBOUR_PROSE = [
    "The harbour board reviewed the tidal survey before approving the new turbines.",
    "Engineers measured currents at the harbour mouth for three full seasons.",
    "Local fishermen asked that the turbines leave the main channel open for boats.",
    "The council expects the first turbine to deliver power within two years.",
    "Maintenance crews will inspect the blades every spring after the storms.",
    "Visitors can follow the construction from a platform on the old pier.",
]


def _summary_of(*paragraphs: str) -> str:
    report = write_report([SourceDocument("harbour.txt", "\n\n".join(paragraphs))], "")
    return sections(report)["Summary"]


def test_a_notice_repeated_across_the_document_is_never_its_summary():
    notices = [
        f"NOTE: This option is reset when the compatible mode number {n} is set again."
        for n in range(4)
    ]
    summary = _summary_of(*[p for pair in zip(notices, HARBOUR_PROSE, strict=False) for p in pair])
    assert "NOTE" not in summary
    assert summary.count(".") >= 3


@pytest.mark.parametrize(
    "fragment",
    [
        # Sentences cut out of longer ones, their brackets or quotes never closed.
        "The value is returned to the caller (as a NUL-terminated string with the harbour name.",
        'The harbour master said "the turbines will stay for many decades to come.',
        # A shell line run into the text.
        "This file was automatically generated by the # update-mime-database harbour command.",
    ],
)
def test_a_summary_sentence_is_whole_and_never_code(fragment: str):
    # The fragment outranks the prose by its terms, if it were allowed to.
    summary = _summary_of(*HARBOUR_PROSE[:3], fragment, fragment.replace("harbour", "tidal"))
    assert fragment[:30] not in summary
    assert fragment.replace("harbour", "tidal")[:30] not in summary


def test_near_duplicate_sentences_are_said_once():
    twice = [
        "The turbines in the harbour mouth will deliver power to four hundred homes.",
        "The turbines in the harbour mouth will deliver power to four hundred homes nearby.",
    ]
    summary = _summary_of(twice[0], *HARBOUR_PROSE, twice[1])
    assert summary.count("deliver") == 1
