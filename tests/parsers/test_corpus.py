"""Every real document of the corpus, read and reported on as a user would see it.

The corpus (tests/fixtures/corpus/README.md) holds public documents nobody here wrote;
facts.json says what a reader would check in each: its title and top-level sections.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from reports.parsers import parser_for
from reports.parsers.html import html_to_text
from reports.providers.base import SourceDocument
from reports.providers.report_writer import write_report
from reports.rendering import render_markdown
from reports.validation import validate_report

CORPUS = Path(__file__).parent.parent / "fixtures" / "corpus"
FACTS = json.loads((CORPUS / "facts.json").read_text())
# Source markup of Markdown and HTML that must never reach a reader as text.
MARKUP = ("](", "![", "[![", "<img", "<p", "<div", "<a ", "`", "**", "badge.svg")
_CONTENTS_LINE = re.compile(r"(?:\.\s?){4,}|\s\d{1,4}(?:,\s*\d{1,4})+$")
# What a document says about its own licence is not what it is about.
_BOILERPLATE = re.compile(
    r"permission is (?:hereby )?granted|free documentation licen[cs]e|licen[cs]ed under"
    r"|released under|copyright|all rights reserved|public domain|licen[cs]es?\b",
    re.IGNORECASE,
)
# A function reference's lines: labelled fields, and sentences made of identifiers.
_REFERENCE = re.compile(
    r"^(?:returns?|return value|parameters?|arguments?)\s*:|\[(?:function|macro|constant)\]"
    r"|(?:\b(?:[a-z]\w*_\w+|[A-Z0-9]+_[A-Z0-9_]+)\b.*){2}",
    re.IGNORECASE,
)


@functools.cache
def _report(name: str) -> tuple[str, str]:
    """Return the document's parsed text and the simulated model's report of it."""
    parser = parser_for(name)
    assert parser is not None
    text = parser.extract((CORPUS / name).read_bytes())
    return text, write_report([SourceDocument(name, text)], "")


def _visible(report: str) -> str:
    return html_to_text(render_markdown(report))


def _section(report: str, name: str) -> str:
    return report.split(f"## {name}\n\n", 1)[1].split("\n## ", 1)[0]


def test_the_corpus_has_every_format_and_at_least_twelve_documents() -> None:
    assert len(FACTS) >= 12
    assert {Path(name).suffix for name in FACTS} == {".pdf", ".docx", ".html", ".md", ".txt"}
    assert sorted(FACTS) == sorted(
        p.name
        for p in CORPUS.iterdir()
        if p.suffix in {".pdf", ".docx", ".html", ".md", ".txt"} and p.name != "README.md"
    )


@pytest.mark.parametrize("name", sorted(FACTS))
def test_the_report_is_titled_and_structured_as_the_document(name: str) -> None:
    _text, report = _report(name)
    visible = _visible(report)

    assert validate_report(report, max_kb=200) == []
    assert "\f" not in report  # a PDF's page marks are the parser's, never the reader's
    assert visible.splitlines()[0] == f"# {FACTS[name]['title']}"
    structure = _visible(_section(report, "Document structure"))
    for section in FACTS[name]["sections"]:
        assert section in structure


@pytest.mark.parametrize("name", sorted(FACTS))
def test_the_summary_is_made_of_sentences_never_contents_or_index_lines(name: str) -> None:
    _text, report = _report(name)
    summary = _visible(_section(report, "Summary"))
    sentences = re.split(r"(?<=[.!?])\s+(?=[\"“(\[]?[A-Z])", summary)

    assert len(sentences) >= 3
    for sentence in sentences:
        assert len(sentence.split()) >= 6, sentence
        assert re.search(r"[.!?][\"\u201d\u2019)\]]*$", sentence), sentence
        assert not _CONTENTS_LINE.search(sentence), sentence


@pytest.mark.parametrize("name", sorted(FACTS))
def test_the_summary_is_never_licence_boilerplate_or_function_reference(name: str) -> None:
    text, report = _report(name)
    summary = _visible(_section(report, "Summary"))
    sentences = re.split(r"(?<=[.!?])\s+(?=[\"“(\[]?[A-Z])", summary)
    asides = FACTS[name].get("not_summarised", [])

    for sentence in sentences:
        assert not _BOILERPLATE.search(sentence), sentence
        assert not _REFERENCE.search(sentence), sentence
        assert _top_section(text, sentence) not in asides, sentence


def _top_section(text: str, sentence: str) -> str:
    """Return the top-level section of the parsed text that `sentence` comes from."""
    words = sentence.rstrip("…").split()[:8]
    found = re.search(r"\s+".join(re.escape(w) for w in words), text)
    assert found, sentence
    headings = re.findall(r"^## (.*)$", text[: found.start()], flags=re.MULTILINE)
    return re.sub(r"^[\d.]+\s+", "", headings[-1]) if headings else ""


@pytest.mark.parametrize("name", [n for n in sorted(FACTS) if n.endswith((".md", ".html"))])
def test_markdown_and_html_markup_never_shows_as_source(name: str) -> None:
    text, report = _report(name)
    visible = _visible(report)

    # What goes to a real model is text too: outside code, no link or image syntax.
    prose = re.sub(r"^(`{3,}).*?^\1$", "", text, flags=re.MULTILINE | re.DOTALL)
    for markup in MARKUP:
        assert markup not in visible, markup
    for markup in ("](", "![", "<img", "<p>"):
        assert markup not in prose, markup


def test_the_nettle_manual_is_summarised_from_the_chapters_that_explain_not_its_reference():
    text, report = _report("nettle-manual.pdf")
    summary = _visible(_section(report, "Summary"))
    sentences = re.split(r"(?<=[.!?])\s+(?=[\"“(\[]?[A-Z])", summary)

    from_reference = [s for s in sentences if _top_section(text, s) == "Reference"]
    assert len(from_reference) < len(sentences) / 2, from_reference
