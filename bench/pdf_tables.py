"""Tables in PDFs: pdfplumber's table finder against the layout reader (docs/parsers.md).

    python -m bench.pdf_tables [--runs 3]

Reads the corpus's PDFs (tests/fixtures/corpus) and PDFs with known tables, made here
with WeasyPrint from HTML: one with ruled tables (cell borders, as a spreadsheet prints),
one with the same tables unruled (only whitespace between columns, as most reports set
them). For each reader: tables found, cells read right (each true cell found, in its row
and column, in a table found), and the median CPU time per page over --runs reads (CPU
time, not wall time: the machine may be shared). Reportline's time is its whole read
(text, layout and tables), pdfplumber's its table finding alone. pdfplumber is run with
its default (ruled) finder and with its text-alignment finder, which unruled tables need.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "corpus"

BUDGET = [
    ["Department", "2025", "2026", "Change"],
    ["Engineering", "350,000", "412,000", "+18 %"],
    ["Hosting", "100,000", "118,000", "+18 %"],
    ["Marketing", "80,000", "82,000", "+3 %"],
    ["Support", "64,500", "61,200", "-5 %"],
]
STATIONS = [["Station", "High water", "Low water", "Range (m)", "Notes"]] + [
    [f"Harbour {n}", f"0{n % 10}:{10 + n:02d}", f"1{n % 10}:{20 + n:02d}", f"{1 + n / 10:.1f}", w]
    for n, w in zip(range(1, 13), ["calm", "swell", "fog", "calm"] * 3, strict=True)
]
TABLES = [BUDGET, STATIONS]
PROSE = (
    "The tides turn twice a day along this coast, and the harbour master publishes the "
    "times each week. The figures below come from the spring survey and are rounded."
)


def _html(ruled: bool) -> str:
    border = "border: 0.6pt solid #333;" if ruled else ""
    tables = []
    for number, rows in enumerate(TABLES, start=1):
        head = "".join(f"<th>{cell}</th>" for cell in rows[0])
        body = "".join(
            "<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows[1:]
        )
        tables.append(
            f"<p>{PROSE}</p><p>Table {number}: figures of the survey.</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table><p>{PROSE}</p>"
        )
    return (
        "<html><head><style>body{font: 10pt serif} table{border-collapse: collapse; "
        f"margin: 8pt 0}} td, th{{padding: 2pt 10pt; {border} text-align: left}}</style>"
        f"</head><body><h1>Tide survey</h1>{''.join(tables)}</body></html>"
    )


def made_pdfs() -> dict[str, bytes]:
    """Return the PDFs with known tables, by name."""
    from weasyprint import HTML

    return {
        f"tables-{kind}.pdf": HTML(string=_html(kind == "ruled")).write_pdf()
        for kind in ("ruled", "unruled")
    }


def _pdfplumber(strategy: str) -> Callable[[bytes], list]:
    settings = (
        {"vertical_strategy": "text", "horizontal_strategy": "text"} if strategy == "text" else {}
    )

    def read(data: bytes) -> list:
        import pdfplumber

        found = []
        with pdfplumber.open(io.BytesIO(data)) as pdf:
            for page in pdf.pages:
                found += [table.extract() for table in page.find_tables(settings)]
        return found

    return read


def _layout(data: bytes) -> tuple[list, str]:
    from reports.parsers.pdf import document_text
    from reports.providers.table_facts import rows_of

    blocks = document_text(data)["text"].split("\n\n")  # with the pages read by OCR
    found = [rows_of(block.split("\n")) for block in blocks if block.startswith("| ")]
    return [rows for rows in found if rows]


READERS = {
    "reportline (PDFium text boxes)": _layout,
    "pdfplumber, ruled finder": _pdfplumber("lines"),
    "pdfplumber, text finder": _pdfplumber("text"),
}


def _cells_right(found: list, truth: list[list[list[str]]]) -> tuple[int, int]:
    """Return (cells found in their row and column of a table found, cells in all)."""
    total = sum(len(row) for rows in truth for row in rows)
    right = 0
    for rows in truth:
        best = 0
        for table in found:
            cleaned = [[" ".join((c or "").split()) for c in row] for row in table]
            best = max(best, _matching(cleaned, rows))
        right += best
    return right, total


def _matching(table: list[list[str]], rows: list[list[str]]) -> int:
    # The true table may start at any row and column of the table found.
    best = 0
    for r0 in range(max(1, len(table) - len(rows) + 1)):
        for c0 in range(max(1, (max(map(len, table), default=0)) - len(rows[0]) + 1)):
            hits = sum(
                1
                for r, row in enumerate(rows)
                for c, cell in enumerate(row)
                if r0 + r < len(table)
                and c0 + c < len(table[r0 + r])
                and table[r0 + r][c0 + c] == cell
            )
            best = max(best, hits)
    return best


def measure(runs: int) -> list[dict]:
    import pypdfium2

    documents = {path.name: path.read_bytes() for path in sorted(CORPUS.glob("*.pdf"))}
    documents.update(made_pdfs())
    results = []
    for name, data in documents.items():
        pages = len(pypdfium2.PdfDocument(data))
        truth = TABLES if name.startswith("tables-") else []
        for reader, read in READERS.items():
            read(data)  # imports and caches are not timed
            times = []
            for _ in range(runs):
                start = time.process_time()
                found = read(data)
                times.append(time.process_time() - start)
            right, cells = _cells_right(found, truth)
            results.append(
                {
                    "document": name,
                    "pages": pages,
                    "reader": reader,
                    "tables": len(found),
                    "true_tables": len(truth),
                    "cells": f"{right}/{cells}" if truth else "-",
                    "ms_per_page": statistics.median(times) * 1000 / pages,
                }
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print("| Document (pages) | Reader | Tables found (true) | Cells right | Time per page |")
    print("| --- | --- | ---: | ---: | ---: |")
    for row in measure(args.runs):
        print(
            f"| {row['document']} ({row['pages']}) | {row['reader']} | {row['tables']} "
            f"({row['true_tables']}) | {row['cells']} | {row['ms_per_page']:.1f} ms |"
        )


if __name__ == "__main__":
    main()
