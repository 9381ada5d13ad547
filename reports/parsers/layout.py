"""Turn a PDF's positioned lines into structured text: a title, headings, paragraphs, code.

A PDF has no paragraphs, only lines placed on pages. This module reads them as a reader
does: the outline (else font sizes and bold lines) gives the headings, vertical gaps and
indents give the paragraphs, a fixed-pitch font gives code; running headers and footers,
page numbers, contents and index pages are furniture and left out. A form feed marks where
each page after the first begins (one per page, furniture pages included), between blocks
or inside a paragraph that goes on across pages, so that what is cut from the text knows
its page.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass

from reports.parsers.pdf_tables import tables_of
from reports.parsers.tables import markdown_table
from reports.parsers.text import join_wrapped

# A line bigger than the body text by this factor is a heading candidate.
HEADING_SIZE_RATIO = 1.12
# Longer lines are prose, whatever their font.
MAX_HEADING_CHARS = 120
# A line repeated at the top or bottom of at least this share of pages (and of 3 pages)
# is a running header or footer.
RUNNING_SHARE = 0.3
RUNNING_MIN_PAGES = 3
# A page whose lines mostly end in dot leaders or page numbers is a contents or index page.
LEADER_SHARE = 0.5
LEADER_MIN_LINES = 5
# A gap between lines of more than this many font sizes starts a paragraph.
PARAGRAPH_GAP = 1.6
# A first line indented by more than this (in points) starts a paragraph.
INDENT_PT = 6.0
MAX_HEADING_LEVEL = 6
MAX_TITLE_LINES = 3
PAGE_BREAK = "\f"

_PAGE_NUMBER = re.compile(
    r"(?:page\s+)?[-\u2013\u2014\s]*(?:\d{1,5}|[ivxlcdm]{1,7})[-\u2013\u2014\s]*"
    r"(?:(?:of|/)\s*\d{1,5})?",
    re.IGNORECASE,
)
# A line of a table of contents or an index: dot leaders, or page numbers at its end.
_DOT_LEADER = re.compile(r"(?:\.\s?){4,}\s*(?:\d+|[ivxlcdm]+)?\s*$")
_PAGE_REFERENCES = re.compile(r"\s\d{1,4}(?:,\s*\d{1,4})*$")
_FURNITURE_TITLE = re.compile(r"\b(?:contents|index)\b", re.IGNORECASE)
_FURNITURE_HEADING = re.compile(r"(?:table\s+of\s+)?contents|index", re.IGNORECASE)
# Text that ends mid-sentence, so the next column or page goes on with it.
_CONTINUES = re.compile(r"[\w,\-\u2013]$")
_BULLET = re.compile(r"^(?:[\u2022\u25aa\u25cf\u2013\u2014*\-\u25e6]|\d{1,3}[.)])\s+")
_DIGITS = re.compile(r"\d+")
_SENTENCE_END = re.compile(r"[.!?:;]['\"\u201d\u2019)]*$")
_NOT_WORD = re.compile(r"\W+")
# A heading's number ("7.1.2", "A.3"), which an outline's titles may leave out.
_SECTION_NUMBER = re.compile(r"^(?:\d{1,3}|[A-Z])(?:\.\d{1,3})*\.?\s+(?=\w)")
# Generic values some producers write as a document's title.
_NO_TITLE = re.compile(
    r"^(?:untitled|title|document|microsoft word\b.*|.*\.(?:docx?|tex|dvi|pdf|txt|rtf))$",
    re.IGNORECASE,
)


@dataclass
class Line:
    text: str
    size: float
    top: float
    left: float
    bold: bool = False
    mono: bool = False
    cells: tuple = ()  # its `pdf_tables.Cell`s when it reads as a table's row


@dataclass(frozen=True)
class OutlineEntry:
    level: int  # 0 for the top level
    title: str
    page: int  # 0-based, -1 when the entry points nowhere


def structure(pages: list[list[Line]], outline: list[OutlineEntry], metadata_title: str) -> str:
    """Return the document as structured text: "# title", "## section" lines, paragraphs."""
    pages = [[line for line in page if line.text.strip()] for page in pages]
    dropped = _furniture_pages(pages, outline)
    _drop_running_lines(pages)
    body_size = _body_size(pages)
    title, title_lines = _title(pages, metadata_title, body_size)
    headings = (
        _outline_headings(pages, outline)
        if any(entry.page >= 0 for entry in outline)
        else _layout_headings(pages, body_size)
    )
    blocks = _blocks(pages, dropped, headings, title_lines)
    if title:
        blocks.insert(0, f"# {title}")
    return "\n\n".join(blocks)


def _normal(text: str) -> str:
    return _NOT_WORD.sub("", text).lower()


def _furniture_pages(pages: list[list[Line]], outline: list[OutlineEntry]) -> set[int]:
    dropped = set()
    for number, page in enumerate(pages):
        # Dot leaders go line by line (a chapter's own contents share its first page);
        # a page of bare page references is an index.
        leaders = sum(
            1
            for line in page
            if _PAGE_REFERENCES.search(line.text) and not _DOT_LEADER.search(line.text)
        )
        if len(page) >= LEADER_MIN_LINES and leaders >= LEADER_SHARE * len(page):
            dropped.add(number)
    # An outline entry named "Contents" or "Index" covers pages up to the next entry.
    located = sorted((entry for entry in outline if entry.page >= 0), key=lambda e: e.page)
    for i, entry in enumerate(located):
        if _FURNITURE_TITLE.search(entry.title):
            following = [e.page for e in located[i + 1 :] if e.page > entry.page]
            end = following[0] if following else len(pages)
            dropped.update(range(entry.page, end))
    return dropped


def _drop_running_lines(pages: list[list[Line]]) -> None:
    def edges(page: list[Line]) -> list[Line]:
        return page[:2] + page[-2:] if len(page) > 4 else page

    def shape(line: Line) -> tuple[str, int]:
        # The size counts: a title printed big on the first page and small in every running
        # header is the title there, not furniture.
        return _DIGITS.sub("#", line.text.lower()), round(line.size)

    shapes = Counter(found for page in pages for found in {shape(ln) for ln in edges(page)})
    threshold = max(RUNNING_MIN_PAGES, RUNNING_SHARE * len(pages))
    for page in pages:
        furniture = {
            id(line)
            for line in edges(page)
            if shapes[shape(line)] >= threshold or _PAGE_NUMBER.fullmatch(line.text.strip())
        }
        page[:] = [line for line in page if id(line) not in furniture]


def _body_size(pages: list[list[Line]]) -> float:
    sizes = Counter()
    for page in pages:
        for line in page:
            sizes[round(line.size, 1)] += len(line.text)
    return sizes.most_common(1)[0][0] if sizes else 0.0


def _title(pages: list[list[Line]], metadata_title: str, body_size: float) -> tuple[str, set[int]]:
    """Return the title and the ids of the lines that print it on the first page.

    The title is the metadata's, else the first page's biggest text when it stands out.
    """
    first = next((page for page in pages if page), [])
    candidates = [line for line in first if any(ch.isalpha() for ch in line.text)]
    biggest = max((line.size for line in candidates), default=0.0)
    lines = []
    if biggest >= body_size * HEADING_SIZE_RATIO:
        for line in candidates:
            if line.size == biggest and len(lines) < MAX_TITLE_LINES:
                lines.append(line)
            elif lines:
                break
    metadata_title = " ".join(metadata_title.split())
    if metadata_title and not _NO_TITLE.match(metadata_title):
        printed = {id(line) for line in lines if _normal(line.text) in _normal(metadata_title)}
        return metadata_title, printed
    return " ".join(line.text.strip() for line in lines), {id(line) for line in lines}


def _outline_headings(pages: list[list[Line]], outline: list[OutlineEntry]) -> dict[int, int]:
    """Return the level of each line an outline entry points at, by the line's id."""
    headings: dict[int, int] = {}
    for entry in outline:
        if not 0 <= entry.page < len(pages):
            continue
        wanted = _normal(entry.title)
        page = pages[entry.page]
        for i, line in enumerate(page):
            if id(line) in headings or not wanted:
                continue
            # The line may carry the heading's number; a long heading wraps onto the next.
            found = next(
                (
                    text
                    for text in (_normal(line.text), _normal(_SECTION_NUMBER.sub("", line.text)))
                    if text == wanted or (2 * len(text) >= len(wanted) and wanted.startswith(text))
                ),
                None,
            )
            if found:
                level = min(entry.level + 2, MAX_HEADING_LEVEL)
                headings[id(line)] = level
                if found != wanted and i + 1 < len(page):
                    headings[id(page[i + 1])] = -level
                break
    return headings


def _layout_headings(pages: list[list[Line]], body_size: float) -> dict[int, int]:
    """Return heading levels by font size, and bold lines of body size as the lowest level."""
    # The lines a first page opens with before its body text (title, subtitle, authors) are
    # not section headings.
    first = next((i for i, page in enumerate(pages) if page), 0)
    cover = set()
    for line in pages[first] if pages else ():
        if abs(line.size - body_size) < 0.5:
            break
        cover.add(id(line))
    candidates = [
        line
        for page in pages
        for line in page
        if id(line) not in cover
        if len(line.text) <= MAX_HEADING_CHARS
        and not line.mono
        and not _DOT_LEADER.search(line.text)
        and sum(ch.isalpha() for ch in line.text) > 2
        and not _FURNITURE_HEADING.fullmatch(line.text.strip())
    ]
    big = sorted(
        {round(line.size) for line in candidates if line.size >= body_size * HEADING_SIZE_RATIO},
        reverse=True,
    )
    levels = {size: min(i + 2, MAX_HEADING_LEVEL) for i, size in enumerate(big)}
    lowest = min(len(big) + 2, MAX_HEADING_LEVEL)
    headings = {}
    for line in candidates:
        if round(line.size) in levels:
            headings[id(line)] = levels[round(line.size)]
        elif line.bold and abs(line.size - body_size) < 0.5 and not _SENTENCE_END.search(line.text):
            headings[id(line)] = lowest
    return headings


def _blocks(
    pages: list[list[Line]], dropped: set[int], headings: dict[int, int], title_lines: set[int]
) -> list[str]:
    blocks: list[str] = []
    paragraph: list[str] = []
    code: list[str] = []
    previous: Line | None = None
    heading_line = 0  # the level of the heading just read, 0 once other text came
    marked = 0  # the page the last block began on (0-based)

    def mark(number: int, into: list[str]) -> None:
        # Before a block that begins on a new page; inside a paragraph or code block that
        # goes on across one, between its lines.
        nonlocal marked
        if number > marked:
            into.append(PAGE_BREAK * (number - marked))
            marked = number

    def flush() -> None:
        if paragraph:
            blocks.append(_join_across_pages(paragraph))
            paragraph.clear()
        if code:
            blocks.append("```\n" + "\n".join(code) + "\n```")
            code.clear()

    title = _normal(" ".join(pages_text(pages, title_lines)))
    for number, page in enumerate(pages):
        if number in dropped:
            continue
        spacing = _line_spacing(page)
        tables = tables_of(page)
        new_page = True
        for line in page:
            if id(line) in tables:
                if rows := tables[id(line)]:
                    flush()
                    mark(number, blocks)
                    blocks.append(markdown_table(rows))
                    heading_line, previous, new_page = 0, None, False
                continue
            text = _clean(line.text)
            if (
                id(line) in title_lines
                or not text
                or _DOT_LEADER.search(text)
                or _FURNITURE_HEADING.fullmatch(text)
            ):
                continue
            level = headings.get(id(line))
            if level is not None and heading_line == abs(level):
                if blocks[-1].startswith("#"):
                    blocks[-1] += " " + text  # the next line of a wrapped heading
                continue
            if level is not None and level > 0:
                flush()
                mark(number, blocks)
                heading_line = level
                previous = None
                # A heading repeating the title (a half-title page) says nothing new.
                if not (title and _normal(text).startswith(title)):
                    blocks.append("#" * level + " " + text)
                continue
            heading_line = 0
            if line.mono:
                if paragraph:
                    flush()
                mark(number, code or blocks)
                code.append(text)
                previous = line
                continue
            if code or (
                previous is not None and _starts_paragraph(previous, line, spacing, new_page)
            ):
                flush()
            new_page = False
            if _BULLET.match(text):
                flush()
                text = _BULLET.sub("- ", text, count=1)
            mark(number, paragraph or blocks)
            paragraph.append(text)
            previous = line
    flush()
    return [block for block in blocks if block.strip() or block.startswith(PAGE_BREAK)]


def _join_across_pages(lines: list[str]) -> str:
    """Join a paragraph's lines, keeping the page marks between the lines of two pages."""
    joined, group = "", []
    for line in lines:
        if line.startswith(PAGE_BREAK):
            joined += join_wrapped(group) + " " + line
            group = []
        else:
            group.append(line)
    return joined + join_wrapped(group)


def pages_text(pages: list[list[Line]], ids: set[int]) -> list[str]:
    return [line.text for page in pages for line in page if id(line) in ids]


def _line_spacing(page: list[Line]) -> float:
    """Return the usual distance between consecutive lines of a page."""
    gaps = sorted(
        a.top - b.top
        for a, b in itertools.pairwise(page)
        if 0 < a.top - b.top < 3 * max(a.size, 1.0)
    )
    return gaps[len(gaps) // 2] if gaps else 0.0


def _starts_paragraph(previous: Line, line: Line, spacing: float, new_page: bool) -> bool:
    gap = previous.top - line.top
    if new_page or gap < 0:
        # A new page or column: the paragraph goes on if the last line ended mid-sentence.
        return not _CONTINUES.search(_clean(previous.text))
    # PDFium joins a line that ends in a broken word with the next one: its gap to the
    # following line spans both.
    lines = 1 + previous.text.count("\ufffe") + previous.text.count("\x02")
    usual = spacing or line.size * 1.2
    if gap > PARAGRAPH_GAP / 1.2 * usual * lines:
        return True
    return line.left > previous.left + INDENT_PT and bool(
        _SENTENCE_END.search(previous.text.strip())
    )


def _clean(text: str) -> str:
    # PDFium marks a hyphen that broke a word at a line's end with U+FFFE (or U+0002).
    text = text.replace("\ufffe", "").replace("\x02", "")
    return " ".join(text.split())
