"""A document's table as a Markdown pipe table: a header row, its separator, then the rows.

Every parser that finds a table (.docx, HTML, Markdown) writes it here, so that the model
reads one form whatever the format. A cell is one line: its line breaks and runs of
whitespace become one space, and a `|` in it is escaped (`\\|`). A table is bounded, so
that a crafted one cannot fill a prompt with padding: at most MAX_COLUMNS columns (the
ones beyond are left out, and say so in the header) and MAX_CELL_CHARS characters a cell
(cut, ending in "…"); columns empty in every row are left out.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_COLUMNS = 20
MAX_CELL_CHARS = 300
MORE_COLUMNS = "… ({} more columns left out)"


def cell_text(text: str) -> str:
    """Return `text` as one cell: on one line, bounded, its pipes escaped."""
    text = " ".join(text.split())
    if len(text) > MAX_CELL_CHARS:
        text = text[: MAX_CELL_CHARS - 1].rstrip() + "…"
    return text.replace("|", "\\|")


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    """Return `rows` (the first one the header) as a pipe table; "" when no cell has text.

    Short rows are padded with empty cells; empty rows are left out.
    """
    cells = [[cell_text(cell) for cell in row] for row in rows]
    cells = [row for row in cells if any(row)]
    if not cells:
        return ""
    # Counted cell by cell: a crafted table may have one very long row among many short ones.
    kept = sorted({c for row in cells for c, cell in enumerate(row) if cell})
    dropped = max(0, len(kept) - MAX_COLUMNS)
    kept = kept[:MAX_COLUMNS]
    table = [[row[c] if c < len(row) else "" for c in kept] for row in cells]
    if dropped:
        for r, row in enumerate(table):
            row.append(MORE_COLUMNS.format(dropped) if r == 0 else "")
    lines = [_line(table[0]), _line(["---"] * len(table[0]))]
    lines += [_line(row) for row in table[1:]]
    return "\n".join(lines)


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"
