"""Every document cut into bounded passages at its own structure, with nothing lost.

What "nothing lost or repeated" means: the passages' texts, in order, hold every character
of the document's structured text but its whitespace, and each passage's text is a piece
of that text read in order. Only the blank lines between paragraphs, the whitespace where
a long paragraph is cut, and a PDF's page marks (form feeds) are not kept.
"""

from __future__ import annotations

import itertools
import json
import re
import textwrap
from pathlib import Path

import pypdfium2
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from reports.parsers import docx, markdown, parser_for, pdf
from reports.parsers.passages import PASSAGE_CHARS, Passage, cut
from reports.providers.base import SourceDocument
from reports.worker import preparation
from tests.parsers import samples

CORPUS = Path(__file__).parent.parent / "fixtures" / "corpus"
FACTS = json.loads((CORPUS / "facts.json").read_text())
HEADING_LINE = re.compile(r"^[ \t]*#{1,6}[ \t]+(.*?)[ \t#]*$|^(.+)\n(?:=+|-+)[ \t]*$", re.MULTILINE)
SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*$")
WORD = re.compile(r"\w+")
BOUND = 400  # small, so that generated documents need many passages


def _squeezed(text: str) -> str:
    return " ".join(text.replace("\f", " ").split())


def assert_whole_and_in_order(text: str, passages: list[Passage], bound: int) -> None:
    """Assert the passages are bounded, numbered in order, and together the document's text."""
    assert [p.number for p in passages] == list(range(1, len(passages) + 1))
    assert all(0 < len(p.text) <= bound for p in passages), [len(p.text) for p in passages]
    assert all(p.text == p.text.strip() and "\f" not in p.text for p in passages)
    assert "".join("".join(p.text.split()) for p in passages) == "".join(text.split())
    document, at = _squeezed(text), 0
    for passage in passages:
        found = document.find(_squeezed(passage.text), at)
        assert found >= 0, passage
        at = found + len(_squeezed(passage.text))


def headings_of(text: str) -> set[str]:
    return {
        (m.group(1) if m.group(1) is not None else m.group(2)).strip()
        for m in HEADING_LINE.finditer(text)
    }


def opening_headings(text: str) -> list[str]:
    """Return the headings a passage opens with, before its first other paragraph."""
    found = []
    for block in re.split(r"\n[ \t]*\n", text):
        heading = headings_of(block)
        if not heading or ("\n" in block.strip() and not re.match(r".+\n[=-]+$", block)):
            break
        found += heading
    return found


def assert_sections_are_headings(text: str, passages: list[Passage]) -> None:
    headings = headings_of(text)
    for passage in passages:
        section = passage.section
        if section is not None and section.endswith("…"):  # a heading too long to name
            assert any(h.startswith(section[:-1]) for h in headings), passage
        else:
            assert section is None or section in headings, passage


def assert_no_heading_left_alone(passages: list[Passage]) -> None:
    """A passage never ends with a heading when more of the document follows."""
    for passage, following in itertools.pairwise(passages):
        if following.document == passage.document:
            last = re.split(r"\n[ \t]*\n", passage.text)[-1]
            assert not re.match(r"#{1,6}\s", last) or "\n" in last, passage


# Documents generated as a writer would lay them out: a title, sections with headings at
# several levels, paragraphs of sentences (some far longer than a passage).
VOCABULARY = (
    "tide harbour turbine power night owl river stone engine signal water copper "
    "lantern valley meadow harvest winter summer record figure measure report"
)
_WORDS = st.sampled_from(VOCABULARY.split())
_SENTENCES = st.lists(_WORDS, min_size=3, max_size=18).map(
    lambda words: " ".join(words).capitalize() + "."
)
_PARAGRAPHS = st.lists(_SENTENCES, min_size=1, max_size=40).map(" ".join)
_HEADINGS = st.lists(_WORDS, min_size=1, max_size=4, unique=True).map(
    lambda words: " ".join(words).title()
)
_SECTIONS = st.lists(
    st.tuples(st.integers(2, 4), _HEADINGS, st.lists(_PARAGRAPHS, min_size=0, max_size=4)),
    min_size=0,
    max_size=6,
)
_DOCUMENTS = st.tuples(_HEADINGS, st.lists(_PARAGRAPHS, max_size=2), _SECTIONS)
_FEW = hypothesis_settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def as_markdown(title, preface, sections) -> bytes:
    blocks = [f"# {title}", *preface]
    for level, heading, paragraphs in sections:
        blocks += ["#" * level + " " + heading, *paragraphs]
    return "\n\n".join(blocks).encode()


def as_text(title, preface, sections) -> bytes:
    blocks = [f"{title}\n{'=' * len(title)}", *preface]
    for _level, heading, paragraphs in sections:
        blocks += [f"{heading}\n{'-' * len(heading)}", *paragraphs]
    return "\n\n".join(blocks).encode()


def as_html(title, preface, sections) -> bytes:
    body = [f"<h1>{title}</h1>", *(f"<p>{p}</p>" for p in preface)]
    for level, heading, paragraphs in sections:
        body += [f"<h{level - 1}>{heading}</h{level - 1}>", *(f"<p>{p}</p>" for p in paragraphs)]
    return f"<html><head><title>{title}</title></head><body>{''.join(body)}</body></html>".encode()


def as_docx(title, preface, sections) -> bytes:
    def build(document) -> None:
        document.add_heading(title, 0)
        for paragraph in preface:
            document.add_paragraph(paragraph)
        for level, heading, paragraphs in sections:
            document.add_heading(heading, level - 1)
            for paragraph in paragraphs:
                document.add_paragraph(paragraph)

    return samples.docx_bytes(build)


READERS = {
    # The sandboxed parsers' own reading functions, called here without the child process.
    "notes.md": (as_markdown, markdown.document_text),
    "notes.txt": (as_text, parser_for("notes.txt").extract),
    "notes.html": (as_html, parser_for("notes.html").extract),
    "notes.docx": (as_docx, docx.document_text),
}


@pytest.mark.parametrize("name", sorted(READERS))
@_FEW
@given(document=_DOCUMENTS)
def test_each_type_is_cut_whole_in_order_and_at_its_headings(name, document) -> None:
    write, read = READERS[name]
    title, preface, sections = document
    text = read(write(*document))

    passages = cut([SourceDocument(name, text)], BOUND)

    assert_whole_and_in_order(text, passages, BOUND)
    assert_sections_are_headings(text, passages)
    assert_no_heading_left_alone(passages)
    assert all(p.page is None and p.document == name for p in passages)
    # Every section's text stands under its own heading (or the title before the first).
    named = {heading for _level, heading, paragraphs in sections if paragraphs}
    assert named <= {p.section for p in passages}
    # The title opens the first passage; what stands under it before a section, under it.
    assert WORD.findall(passages[0].text)[: len(title.split())] == title.split()
    if preface:
        assert passages[0].section == title


def pdf_pages(title: str, paragraphs: list[str], lines_a_page: int) -> list[list[str]]:
    """Lay out the paragraphs as a PDF writer would: wrapped lines, a blank line between
    paragraphs, `lines_a_page` lines to a page."""
    lines = [title, ""]
    for paragraph in paragraphs:
        lines += [*textwrap.wrap(paragraph, 70), ""]
    return [lines[i : i + lines_a_page] for i in range(0, len(lines), lines_a_page)]


@_FEW
@given(
    title=_HEADINGS,
    paragraphs=st.lists(_PARAGRAPHS, min_size=1, max_size=8),
    lines_a_page=st.integers(3, 40),
)
def test_a_pdf_is_cut_whole_and_each_passage_knows_the_page_it_starts_on(
    title, paragraphs, lines_a_page
) -> None:
    pages = pdf_pages(title, paragraphs, lines_a_page)
    text = pdf.document_text(samples.text_pdf(*("\n".join(page) for page in pages)))["text"]

    passages = cut([SourceDocument("notes.pdf", text)], BOUND)

    assert_whole_and_in_order(text, passages, BOUND)
    assert_pages_are_where_passages_start(passages, [" ".join(page) for page in pages])


def assert_pages_are_where_passages_start(passages: list[Passage], pages: list[str]) -> None:
    numbers = [p.page for p in passages]
    assert numbers == sorted(numbers)
    assert numbers[0] == 1 and numbers[-1] <= len(pages)
    for passage in passages:
        first_words = " ".join(WORD.findall(passage.text.split("\n")[0])[:3])
        assert first_words in " ".join(WORD.findall(pages[passage.page - 1])), passage


# Structured text as any parser may write it: headings, paragraphs, code, page marks,
# stray whitespace, words longer than a passage.
_TOKENS = st.one_of(
    _SENTENCES,
    _WORDS,
    st.sampled_from(["\n", "\n\n", "\n\n\n", " ", "\t", "\f", "\n\f\n", "```", "## ", "# "]),
    st.text(alphabet="abc", min_size=BOUND, max_size=3 * BOUND),
    st.text(min_size=1, max_size=30),
)


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(_TOKENS, max_size=120),
    bound=st.integers(40, 2 * BOUND),
    name=st.sampled_from(["a.pdf", "a.md"]),
)
def test_any_structured_text_is_cut_whole_bounded_and_in_order(parts, bound, name) -> None:
    text = "".join(parts)
    passages = cut([SourceDocument(name, text)], bound)

    assert_whole_and_in_order(text, passages, bound)
    assert_sections_are_headings(text.replace("\f", "\n"), passages)
    if name == "a.pdf":
        numbers = [p.page for p in passages]
        assert numbers == sorted(numbers)
        assert all(1 <= n <= text.count("\f") + 1 for n in numbers)


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    sentences=st.lists(_SENTENCES.filter(lambda s: len(s) <= BOUND // 3), min_size=1),
    paragraphs=st.integers(1, 3),
)
def test_a_passage_never_splits_a_sentence_when_one_ends_in_the_last_third(
    sentences, paragraphs
) -> None:
    # Sentences at most a third of the bound long: one always ends in the last third.
    step = -(-len(sentences) // paragraphs)
    text = "\n\n".join(" ".join(sentences[i : i + step]) for i in range(0, len(sentences), step))

    passages = cut([SourceDocument("a.txt", text)], BOUND)

    assert_whole_and_in_order(text, passages, BOUND)
    for passage in passages:
        assert SENTENCE_END.search(passage.text), passage.text[-40:]


def test_a_document_of_one_200_kb_paragraph_is_cut_at_sentence_ends() -> None:
    sentence = "The tide turns twice a day and the harbour turbine keeps turning with it. "
    text = (sentence * (200_000 // len(sentence))).strip()

    passages = cut([SourceDocument("one-paragraph.txt", text)])

    assert len(text) >= 199_000
    assert len(passages) >= len(text) // PASSAGE_CHARS
    assert_whole_and_in_order(text, passages, PASSAGE_CHARS)
    assert all(p.text.endswith("with it.") for p in passages)
    assert all(p.section is None and p.page is None for p in passages)


def test_a_paragraph_without_sentences_is_cut_at_spaces_else_anywhere() -> None:
    words = " ".join(["harbour"] * 1000)
    unbroken = "x" * 5000

    by_words = cut([SourceDocument("a.txt", words)])
    by_length = cut([SourceDocument("a.txt", unbroken)])

    assert_whole_and_in_order(words, by_words, PASSAGE_CHARS)
    assert all(set(p.text.split()) == {"harbour"} for p in by_words)
    assert [len(p.text) for p in by_length] == [1500, 1500, 1500, 500]


def test_passages_are_numbered_across_documents_in_their_order() -> None:
    first = SourceDocument("first.md", "# First\n\nOne paragraph.")
    second = SourceDocument("second.txt", "Another paragraph.\n\nAnd one more.")

    passages = cut([first, second])

    assert [(p.id, p.document, p.section, p.text) for p in passages] == [
        ("S1", "first.md", "First", "# First\n\nOne paragraph."),
        ("S2", "second.txt", None, "Another paragraph.\n\nAnd one more."),
    ]


def test_a_passage_holds_one_section_and_one_page() -> None:
    text = (
        "# Guide\n\nIntro.\n\n## Setup\n\nInstall it.\n\nRun it.\n\n"
        "### Options\n\nSet the flag.\n\n\f\n\nStill options, next page.\n\n"
        "## Use\n\n```\n# not a heading\n\nstill code\n```"
    )

    passages = cut([SourceDocument("guide.pdf", text)])

    assert [(p.section, p.page, p.text) for p in passages] == [
        ("Guide", 1, "# Guide\n\nIntro."),
        ("Setup", 1, "## Setup\n\nInstall it.\n\nRun it."),
        ("Options", 1, "### Options\n\nSet the flag."),
        ("Options", 2, "Still options, next page."),
        ("Use", 2, "## Use\n\n```\n# not a heading\n\nstill code\n```"),
    ]


def test_a_heading_at_a_page_end_stays_with_its_body_on_the_next_page() -> None:
    body = "The chapter begins here. " * 100
    text = f"# Manual\n\nFirst words.\n\n## Chapter\n\n\f\n\n{body.strip()}"

    passages = cut([SourceDocument("manual.pdf", text)], BOUND)

    assert passages[1].text.startswith("## Chapter\n\nThe chapter begins here.")
    assert (passages[1].section, passages[1].page) == ("Chapter", 1)
    assert {p.page for p in passages[2:]} == {2}
    assert_whole_and_in_order(text, passages, BOUND)


def _corpus_passages(name: str) -> tuple[str, list[Passage]]:
    text = parser_for(name).extract((CORPUS / name).read_bytes())
    return text, cut([SourceDocument(name, text)])


@pytest.mark.parametrize("name", sorted(FACTS))
def test_corpus_passages_are_whole_under_real_headings(name: str) -> None:
    text, passages = _corpus_passages(name)

    assert_whole_and_in_order(text, passages, PASSAGE_CHARS)
    assert_sections_are_headings(text, passages)
    assert_no_heading_left_alone(passages)
    assert passages[0].text.startswith((f"# {FACTS[name]['title']}", FACTS[name]["title"]))
    # Each top-level section opens a passage (maybe with its first subsection's heading).
    opening = {heading for p in passages for heading in opening_headings(p.text)}
    for section in FACTS[name]["sections"]:
        assert any(heading.endswith(section) for heading in opening), section


@pytest.mark.parametrize("name", [n for n in sorted(FACTS) if n.endswith(".pdf")])
def test_corpus_pdf_passages_carry_the_pages_they_start_on(name: str) -> None:
    _text, passages = _corpus_passages(name)
    document = pypdfium2.PdfDocument((CORPUS / name).read_bytes())
    pages = [document[i].get_textpage().get_text_range() for i in range(len(document))]

    assert_pages_are_where_passages_start(passages, pages)
    # Pages 1…N in order, none skipped but those a reader skips too (contents, index).
    assert len({p.page for p in passages}) >= 0.8 * len(pages)


DOCUMENTS = [
    SourceDocument("guide.md", "# Guide\n\n## Setup\n\nInstall it.\n\n## Use\n\nRun it."),
    SourceDocument("manual.pdf", "# Manual\n\nFirst page.\n\n\f\n\nSecond page."),
]


@pytest.mark.django_db
def test_a_task_stores_its_passages_once_and_every_attempt_reads_the_same(make_task) -> None:
    task = make_task()

    first = preparation.store_passages(task.pk, cut(DOCUMENTS))

    assert [(p.id, p.document, p.section, p.page) for p in first] == [
        ("S1", "guide.md", "Setup", None),
        ("S2", "guide.md", "Use", None),
        ("S3", "manual.pdf", "Manual", 1),
        ("S4", "manual.pdf", "Manual", 2),
    ]
    assert preparation.stored_passages(task.pk) == first
    assert task.passages.count() == 4


@pytest.mark.django_db
def test_an_attempt_storing_passages_after_another_reads_the_ones_stored_first(
    make_task,
) -> None:
    task = make_task()
    other = cut([SourceDocument("other.md", "# Other\n\nWritten by the other attempt.")])

    assert preparation.store_passages(task.pk, other) == other
    assert preparation.store_passages(task.pk, cut(DOCUMENTS)) == other
    assert list(task.passages.values_list("document", flat=True)) == ["other.md"]
