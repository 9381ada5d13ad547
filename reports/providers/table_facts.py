"""What a table of a document holds, in one sentence: its caption (else its header), its
largest figure and its biggest change.

The parsers write a table as a Markdown pipe table (docs/parsers.md): a header row, a
separator row, then rows, a `|` inside a cell escaped as `\\|`; rows of cells separated by
" | " without the outer pipes (plain text) are read too. Figures are read as a reader reads
them: "412,000", "1.5", "-3", "+18 %", "$1,200".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIN_ROWS = 2  # a header and one row
MIN_CELLS = 2
CAPTION_CHARS = 120
CELL_CHARS = 60

_SEPARATOR_ROW = re.compile(r"\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?")
_CELL_EDGE = re.compile(r"(?<!\\)\|")  # a pipe that is not escaped
_CAPTION = re.compile(r"(?:table|tab\.)\s*[\w.\-]*\s*[:.\u2013\u2014-]\s*\S", re.IGNORECASE)
# A figure fills its cell: an optional sign or currency, digits grouped by commas, a
# fraction, an optional unit or percent sign.
_FIGURE = re.compile(
    r"(?P<sign>[-+\u2212]?)\s*[$\u20ac\u00a3]?\s*"
    r"(?P<digits>\d{1,3}(?:,\d{3})+|\d+)(?P<fraction>\.\d+)?\s*(?:%|[a-zA-Z]{1,3})?"
)


@dataclass
class Table:
    rows: list[list[str]]
    caption: str = ""
    passage: str = ""  # the id of the passage the table was read from, when known


def rows_of(block: list[str]) -> list[list[str]] | None:
    """Return the block's rows when the block is a table, else None."""
    rows = []
    for line in block:
        if _SEPARATOR_ROW.fullmatch(line.strip()):
            continue
        if " | " not in line and not line.strip().startswith("|"):
            return None
        rows.append([_unescaped(cell) for cell in _CELL_EDGE.split(_outer_pipes_off(line))])
    width = len(rows[0]) if rows else 0
    if len(rows) < MIN_ROWS or width < MIN_CELLS or any(len(row) != width for row in rows):
        return None
    return rows


def _outer_pipes_off(line: str) -> str:
    line = line.strip()
    line = line.removeprefix("|")
    return line[:-1] if line.endswith("|") and not line.endswith("\\|") else line


def _unescaped(cell: str) -> str:
    return cell.strip().replace("\\|", "|")


def is_caption(text: str) -> bool:
    return bool(_CAPTION.match(text.strip()))


def describe(table: Table) -> str:
    """Return one sentence on what the table holds."""
    header, body = table.rows[0], table.rows[1:]
    name = _cut(table.caption, CAPTION_CHARS) if table.caption else "A table"
    shape = f"{', '.join(_cut(cell, CELL_CHARS) for cell in header)}; {_rows(len(body))}"
    facts = [f"{name} ({shape})"]
    figures = {
        (r, c): value
        for r, row in enumerate(body)
        for c, cell in enumerate(row)
        if c > 0 and (value := figure(cell)) is not None
    }
    if figures:
        (r, c), _ = max(figures.items(), key=lambda item: item[1])
        facts.append(f"the largest figure is {_at(body[r][c], body[r][0], header[c])}")
    if change := _biggest_change(header, body, figures):
        facts.append(change)
    return "; ".join(facts) + "."


def figure(cell: str) -> float | None:
    """Return the number a cell holds, or None when it holds text."""
    found = _FIGURE.fullmatch(cell.strip())
    if found is None:
        return None
    value = float(found["digits"].replace(",", "") + (found["fraction"] or ""))
    return -value if found["sign"] in ("-", "\u2212") else value


def _biggest_change(
    header: list[str], body: list[list[str]], figures: dict[tuple[int, int], float]
) -> str:
    """Return the row whose figures change most, relatively, from the first numeric column
    to the last of the same kind, said as a reader would; "" when the table has fewer than
    two such columns. A column of percentages ("Change", "+4.6%") is not the same kind as
    one of amounts: a change from 40,714 to -4.6% means nothing."""
    columns = sorted({c for _, c in figures})
    if len(columns) < 2:
        return ""
    first = columns[0]
    kind = _percent_column(body, first)
    last = max(c for c in columns if _percent_column(body, c) == kind)
    if last == first:
        return ""
    changes = [
        ((figures[r, last] - figures[r, first]) / abs(figures[r, first]), r)
        for r in range(len(body))
        if (r, first) in figures and (r, last) in figures and figures[r, first]
    ]
    if not changes:
        return ""
    change, r = max(changes, key=lambda item: abs(item[0]))
    row = body[r]
    return (
        f"the biggest change is {_cut(row[0], CELL_CHARS)}, from {row[first]} to {row[last]} "
        f"({change:+.0%}) between {_cut(header[first], CELL_CHARS)} and "
        f"{_cut(header[last], CELL_CHARS)}"
    ).replace("%)", " %)")


def _percent_column(body: list[list[str]], column: int) -> bool:
    """Say whether the column's figures are percentages."""
    cells = [row[column].strip() for row in body if figure(row[column]) is not None]
    return bool(cells) and all(cell.endswith("%") for cell in cells)


def _at(value: str, row: str, column: str) -> str:
    return f"{value} ({_cut(row, CELL_CHARS)}, {_cut(column, CELL_CHARS)})"


def _rows(n: int) -> str:
    return "1 row" if n == 1 else f"{n} rows"


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"
