"""Tables in a PDF's text layer, found from PDFium's own text boxes (docs/parsers.md).

A PDF has no tables, only text placed on a page. PDFium already splits each line into
boxes of text; a table's row is a line whose boxes stand apart by wide gaps (more than
GAP_SIZES times the font size: a word space is a quarter of it), in MIN_COLUMNS columns or
more. MIN_ROWS such lines in a row, with the same number of columns and each column's
left or right edge within ALIGN_PT of the line above (numbers are set flush right), are a
table, written as a pipe table. Two-column tables are not looked for: aligned pairs (a
name and its category in a reference manual, a two-column page) are too common to tell
from them.

It costs a few PDFium calls per line, and two per character of a line in three columns or
more, in the sandboxed child that already reads the page: linear in the text.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import pypdfium2
import pypdfium2.raw as pdfium_c

MIN_COLUMNS = 3
MIN_ROWS = 3  # a header and two rows
GAP_SIZES = 1.5
ALIGN_PT = 3.0


@dataclass(frozen=True)
class Cell:
    left: float
    right: float
    text: str


def cells_of(
    textpage: pypdfium2.PdfTextPage, first: int, count: int, size: float
) -> tuple[Cell, ...]:
    """Return the cells of the line of `count` characters from `first`, left to right, when
    they stand in MIN_COLUMNS columns or more; () otherwise."""
    boxes = []
    left, top, right, bottom = (ctypes.c_double() for _ in range(4))
    for i in range(pdfium_c.FPDFText_CountRects(textpage.raw, first, count)):
        pdfium_c.FPDFText_GetRect(textpage.raw, i, left, top, right, bottom)
        boxes.append([left.value, right.value, top.value, bottom.value])
    boxes.sort()
    columns: list[list[float]] = []
    for box in boxes:
        if columns and box[0] - columns[-1][1] < GAP_SIZES * max(size, 1.0):
            column = columns[-1]
            column[1] = max(column[1], box[1])
            column[2], column[3] = max(column[2], box[2]), min(column[3], box[3])
        else:
            columns.append(box)
    if len(columns) < MIN_COLUMNS:
        return ()
    # Each character goes to the column its box starts in: one call a character, where
    # asking PDFium for the text inside each column's box would scan the whole page each time.
    texts: list[list[str]] = [[] for _ in columns]
    column = 0
    for index in range(first, first + count):
        x0 = textpage.get_charbox(index)[0]
        while column + 1 < len(columns) and x0 >= columns[column + 1][0] - ALIGN_PT:
            column += 1
        texts[column].append(chr(pdfium_c.FPDFText_GetUnicode(textpage.raw, index)))
    # PDFium marks a hyphen that broke a word at a line's end with U+FFFE (or U+0002).
    texts = [[ch for ch in text if ch not in "\ufffe\x02"] for text in texts]
    return tuple(
        Cell(box[0], box[1], " ".join("".join(text).split()))
        for box, text in zip(columns, texts, strict=True)
    )


def tables_of(lines: Sequence) -> dict[int, list[list[str]] | None]:
    """Return, by the id of each line (a `layout.Line`) of the page's tables, the table's
    rows for its first line and None for the others."""
    found: dict[int, list[list[str]] | None] = {}
    start = 0
    while start < len(lines):
        end = start + 1
        while end < len(lines) and _aligned(lines[end - 1], lines[end]):
            end += 1
        if end - start >= MIN_ROWS:
            run = lines[start:end]
            found[id(run[0])] = [[cell.text for cell in line.cells] for line in run]
            found.update((id(line), None) for line in run[1:])
        start = end
    return found


def _aligned(above, line) -> bool:
    if not above.cells or above.mono or line.mono or len(above.cells) != len(line.cells):
        return False
    return all(
        abs(a.left - b.left) <= ALIGN_PT or abs(a.right - b.right) <= ALIGN_PT
        for a, b in zip(above.cells, line.cells, strict=True)
    )
