"""Passages: a task's documents cut, at their own structure, into bounded pieces S1…Sn.

A passage is what a report cites (`[S12]`) and what a plan of calls groups into parts
(docs/api.md, "Passages, parts and citations"). The parsers structured text says where
the structure is: `#` headings name the section a passage belongs to, blank lines end
paragraphs, and a form feed (`\\f`) marks where a PDF's next page begins.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from reports.providers.base import SourceDocument

PASSAGE_CHARS = 1500  # a passage holds at most this many characters
PAGE_BREAK = "\f"
_HEADING = re.compile(r"^(#{1,6})\s+(.*\S)\s*$")


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

    Every character of text (but the blank lines between paragraphs and the page marks)
    is in exactly one passage, in order.
    """
    passages: list[Passage] = []
    for document in documents:
        for section, page, text in _pieces(document.text, max_chars):
            passages.append(Passage(len(passages) + 1, document.name, section, page, text))
    return passages


def _pieces(text: str, max_chars: int) -> Iterator[tuple[str | None, int | None, str]]:
    """Yield (section, page, text) pieces of one document: its paragraphs, with small ones
    in the same section joined up to `max_chars`, and long ones split."""
    paged = PAGE_BREAK in text
    page = 1 if paged else None
    section: str | None = None
    held: list[str] = []
    held_page = page
    for block, block_page in _blocks(text, paged):
        heading = _HEADING.match(block.splitlines()[0]) if block else None
        starts_section = heading is not None and len(heading.group(1)) > 1
        if held and (starts_section or len("\n\n".join([*held, block])) > max_chars):
            yield section, held_page, "\n\n".join(held)
            held = []
        if starts_section:
            section = heading.group(2)
        for piece in _split(block, max_chars):
            if not held:
                held_page = block_page
            if held and len("\n\n".join([*held, piece])) > max_chars:
                yield section, held_page, "\n\n".join(held)
                held, held_page = [], block_page
            held.append(piece)
        page = block_page
    if held:
        yield section, held_page, "\n\n".join(held)


def _blocks(text: str, paged: bool) -> Iterator[tuple[str, int | None]]:
    """Yield the document's paragraphs with the page each starts on."""
    pages = text.split(PAGE_BREAK) if paged else [text]
    for number, page_text in enumerate(pages, start=1):
        for block in re.split(r"\n\s*\n", page_text):
            block = block.strip("\n")
            if block.strip():
                yield block, (number if paged else None)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _split(block: str, max_chars: int) -> Iterator[str]:
    """Yield `block` in pieces of at most `max_chars`, cut at sentence ends where one is
    near, else at a space, else anywhere."""
    while len(block) > max_chars:
        window = block[: max_chars + 1]
        ends = [m.end() for m in _SENTENCE_END.finditer(window) if m.end() <= max_chars]
        cut_at = ends[-1] if ends and ends[-1] >= max_chars // 2 else window.rfind(" ")
        if cut_at <= 0:
            cut_at = max_chars
        yield block[:cut_at].rstrip()
        block = block[cut_at:].lstrip()
    if block:
        yield block
