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
from dataclasses import dataclass, field

from reports.parsers import extension_of
from reports.providers.base import SourceDocument

# About 250 words (500 tokens): a fifth of the input a 4,096-token window leaves a part
# once 1,024 are kept for its notes, so parts pack with little room left over; and a
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
        paged = extension_of(document.name) == ".pdf"
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

    A heading or a new page starts a passage; small paragraphs that follow join it up to
    `max_chars`; a heading stays with the start of what it introduces; a block longer
    than the bound is split (`_split`).
    """
    title: str | None = None
    section: str | None = None
    held = _Held()
    for block in _blocks(text, paged):
        if block.heading is not None:
            level, name = block.heading
            if level == 1 and title is None and section is None:
                title = name
            else:
                section = name
        if (
            held.parts
            and not held.only_headings
            and (
                block.heading is not None
                or block.page != held.page
                or held.size_with(block.text) > max_chars
            )
        ):
            yield held.passage()
        if not held.parts:
            held.page = block.page
        if held.only_headings:
            # A passage that opens with headings stands under the last of them.
            held.section = _name(section or title)
        if held.size_with(block.text) <= max_chars:
            held.add(block.text, heading=block.heading is not None)
            continue
        room = max_chars - held.size_with("")
        if room < max_chars * (1 - _HEADING_SHARE):
            yield held.passage()
            held.page, room = block.page, max_chars
        *whole, last = _split(block.text, max_chars, room)
        for piece in whole:
            held.add(piece, heading=False)
            yield held.passage()
            held.page = block.page
        held.add(last, heading=False)
    if held.parts:
        yield held.passage()


@dataclass
class _Held:
    """The passage being gathered."""

    parts: list[str] = field(default_factory=list)
    size: int = 0  # the length of its text
    page: int | None = None
    section: str | None = None
    only_headings: bool = True  # it holds headings only, waiting for their body

    def size_with(self, text: str) -> int:
        return self.size + len(_JOIN) + len(text) if self.parts else len(text)

    def add(self, text: str, heading: bool) -> None:
        self.size = self.size_with(text)
        self.parts.append(text)
        self.only_headings = self.only_headings and heading

    def passage(self) -> tuple[str | None, int | None, str]:
        text = _JOIN.join(self.parts)
        self.parts, self.size, self.only_headings = [], 0, True
        return self.section, self.page, text


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
            heading = None if fence else _heading(block)
            if "```" in block or "~~~" in block:
                fence = _fence_after(block, fence)
            yield _Block(block, number if paged else None, heading)


def _heading(block: str) -> tuple[int, str] | None:
    first, _, rest = block.partition("\n")
    if match := _HEADING.match(first):
        # Any whitespace around the name is none of it (a control character that Python
        # counts as a space included).
        name = match.group(2).strip()
        return (len(match.group(1)), name) if name else None
    if rest and "\n" not in rest and _UNDERLINE.match(rest) and first.strip():
        return (1 if rest[0] == "=" else 2), first.strip()
    return None


def _fence_after(block: str, fence: str) -> str:
    """Return the fence still open after `block` ("" when none is)."""
    for line in block.split("\n"):
        if match := _FENCE.match(line.strip()):
            marker = match.group(1)
            if not fence:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = ""
    return fence


def _split(block: str, max_chars: int, first: int) -> list[str]:
    """Return `block` in pieces of at most `max_chars` (the first at most `first`).

    Each is cut at the last sentence end in the second half of its room, else at the
    last line break there, else at the last space, else at the bound. A table is cut
    between rows wherever its room ends, and inside a row only when one row is longer
    than the room.
    """
    table = _is_table(block)
    boundaries = (_LINE_END, _SPACE) if table else (_SENTENCE_END, _LINE_END, _SPACE)
    pieces = []
    start, room = 0, first
    while len(block) - start > room:
        end = start + room
        cut_at = None
        for boundary in boundaries:
            ends = [m.end() for m in boundary.finditer(block, start + 1, end + 1) if m.end() <= end]
            if ends and (boundary is _SPACE or table or ends[-1] - start >= room // 2):
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


def _is_table(block: str) -> bool:
    """Tell whether the block is a pipe table (docs/parsers.md): every line a row."""
    return all(line.startswith("|") for line in block.split("\n"))
