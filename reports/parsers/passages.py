"""Passages: a task's documents cut, at their own structure, into bounded pieces S1…Sn.

A passage is what a report cites (`[S12]`) and what a plan of calls groups into parts
(docs/api.md, "Passages, parts and citations"). The parsers' structured text says where
the structure is: `#` (or underlined) headings name the section a passage belongs to,
blank lines end paragraphs, and in a PDF's text a form feed (`\\f`) marks where each
page after the first begins (docs/parsers.md, "Passages").
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from reports.providers.base import SourceDocument

# About 250 words: a tenth of what a 4,096-token window leaves for a part's input, and a
# claim's worth of text for a citation to point at.
PASSAGE_CHARS = 1500
PAGE_BREAK = "\f"
# A section heading longer than this is shortened when it names a passage's section.
SECTION_CHARS = 200
# Headings that run longer than this share of the bound go alone rather than squeeze
# their body into fragments.
_HEADING_SHARE = 0.75
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")
_UNDERLINE = re.compile(r"^(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^(`{3,}|~{3,})")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
# Where a sentence ends: its mark, any closing quotes or brackets, then a space.
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]]*(?=\s)")
_LINE_END = re.compile(r"(?=\n)")
_SPACE = re.compile(r"(?=\s)")
_JOIN = "\n\n"


@dataclass(frozen=True)
class Passage:
    """One bounded piece of one document, in reading order across the task's documents."""

    number: int  # 1, 2, 3 … across the task
    document: str  # the file name the user gave
    section: str | None  # the heading it stands under, when the document has one
    page: int | None  # the PDF page it starts on
    text: str

    @property
    def id(self) -> str:
        return f"S{self.number}"


def cut(documents: Sequence[SourceDocument], max_chars: int = PASSAGE_CHARS) -> list[Passage]:
    """Return the documents' passages, numbered from S1 in reading order.

    Every character of each document's structured text is in exactly one passage, in
    order, but the whitespace between paragraphs (and at a cut) and the page marks.
    """
    passages: list[Passage] = []
    for document in documents:
        paged = document.name.strip().lower().endswith(".pdf")
        for section, page, text in _pieces(document.text, max_chars, paged):
            passages.append(Passage(len(passages) + 1, document.name, section, page, text))
    return passages


@dataclass
class _Block:
    text: str
    page: int | None
    heading: tuple[int, str] | None  # (level, title) when the block opens with a heading


def _pieces(text: str, max_chars: int, paged: bool) -> Iterator[tuple[str | None, int | None, str]]:
    """Yield (section, page, text) for each passage of one document.

    A section heading or a new page starts a passage; small paragraphs that follow join
    it up to `max_chars`; a heading stays with the start of what it introduces; a block
    longer than the bound is split (`_split`).
    """
    title: str | None = None
    section: str | None = None
    held: list[str] = []  # the passage being gathered
    held_page: int | None = None
    held_section: str | None = None
    only_headings = True  # what is held is headings waiting for their body

    for block in _blocks(text, paged):
        if block.heading is not None:
            level, name = block.heading
            if level == 1 and title is None and section is None:
                title = name
            else:
                section = name
        if (
            held
            and not only_headings
            and (
                block.heading is not None
                or block.page != held_page
                or len(_JOIN.join([*held, block.text])) > max_chars
            )
        ):
            yield held_section, held_page, _JOIN.join(held)
            held = []
        if not held:
            held_page, only_headings = block.page, True
        if only_headings:
            # A passage that opens with headings stands under the last of them.
            held_section = _name(section or title)
        if len(_JOIN.join([*held, block.text])) <= max_chars:
            held.append(block.text)
        else:
            budget = max_chars - len(_JOIN.join(held)) - len(_JOIN) if held else max_chars
            if budget < max_chars * (1 - _HEADING_SHARE):
                yield held_section, held_page, _JOIN.join(held)
                held, budget = [], max_chars
            *whole, last = _split(block.text, max_chars, budget)
            for piece in whole:
                yield held_section, held_page, _JOIN.join([*held, piece])
                held, held_page = [], block.page
            held = [*held, last]
        only_headings = only_headings and block.heading is not None and block.text == held[-1]
    if held:
        yield held_section, held_page, _JOIN.join(held)


def _name(heading: str | None) -> str | None:
    if heading is None or len(heading) <= SECTION_CHARS:
        return heading
    return heading[: SECTION_CHARS - 1].rstrip() + "…"


def _blocks(text: str, paged: bool) -> Iterator[_Block]:
    """Yield the document's paragraphs, each with its page and heading.

    A fenced code block is read as code to its closing fence, across blank lines: a
    `# comment` inside it is not a heading.
    """
    pages = text.split(PAGE_BREAK) if paged else [text.replace(PAGE_BREAK, "\n")]
    fence = ""
    for number, page_text in enumerate(pages, start=1):
        for raw in _PARAGRAPH_BREAK.split(page_text):
            block = raw.strip()
            if not block:
                continue
            lines = block.split("\n")
            heading = None if fence else _heading(lines)
            for line in lines:
                if match := _FENCE.match(line.strip()):
                    marker = match.group(1)
                    if not fence:
                        fence = marker
                    elif marker[0] == fence[0] and len(marker) >= len(fence):
                        fence = ""
            yield _Block(block, number if paged else None, heading)


def _heading(lines: list[str]) -> tuple[int, str] | None:
    if match := _HEADING.match(lines[0]):
        return (len(match.group(1)), match.group(2)) if match.group(2) else None
    if len(lines) == 2 and _UNDERLINE.match(lines[1]) and lines[0].strip():
        return (1 if lines[1][0] == "=" else 2), lines[0].strip()
    return None


def _split(block: str, max_chars: int, first: int) -> list[str]:
    """Return `block` in pieces of at most `max_chars` (the first at most `first`).

    Each is cut at the last sentence end in the second half of its room, else at the
    last line break there, else at the last space, else at the bound.
    """
    pieces = []
    start, room = 0, first
    while len(block) - start > room:
        end = start + room
        cut_at = None
        for boundary in (_SENTENCE_END, _LINE_END, _SPACE):
            ends = [m.end() for m in boundary.finditer(block, start + 1, end + 1) if m.end() <= end]
            if ends and (boundary is _SPACE or ends[-1] - start >= room // 2):
                cut_at = ends[-1]
                break
        if cut_at is None:
            cut_at = end
        pieces.append(block[start:cut_at].rstrip())
        start = cut_at
        while block[start].isspace():
            start += 1
        room = max_chars
    pieces.append(block[start:])
    return pieces
