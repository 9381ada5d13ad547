"""One good sample per parser, for the contract tests."""

from __future__ import annotations

from dataclasses import dataclass

from docx.document import Document

from reports.parsers import Parser, parser_for
from tests.parsers import samples


@dataclass(frozen=True)
class Case:
    """A parser's good sample, the text its extraction must contain, and a textless document."""

    kind: str
    filename: str
    good: bytes
    expected: tuple[str, ...]
    textless: bytes

    @property
    def parser(self) -> Parser:
        parser = parser_for(self.filename)
        assert parser is not None
        return parser


def _good_docx(document: Document) -> None:
    document.add_heading("Quarterly report", 0)
    document.add_heading("Revenue", 1)
    document.add_paragraph("Revenue grew by 12% in the third quarter.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "Region"
    table.cell(0, 1).text = "Growth"
    table.cell(1, 0).text = "North"
    table.cell(1, 1).text = "15%"


CASES = [
    Case(
        "txt",
        "notes.txt",
        "Quarterly report\r\nRevenue grew by 12% — mostly in the north.\r\n".encode(),
        ("Quarterly report\nRevenue grew by 12% — mostly in the north.",),
        b" \r\n\t \n",
    ),
    Case(
        "md",
        "NOTES.MD",
        b"# Quarterly report\n\nRevenue grew by **12%**.\n",
        ("# Quarterly report", "Revenue grew by 12%."),
        b"\n\n   \n",
    ),
    Case(
        "html",
        "page.html",
        b"<!doctype html><html><head><title>Ignored</title></head><body>"
        b"<h1>Quarterly report</h1><p>Revenue grew by 12% &amp; more.</p></body></html>",
        ("# Quarterly report", "Revenue grew by 12% & more."),
        b"<html><head><title>Only a title</title></head><body> <br> </body></html>",
    ),
    Case(
        "pdf",
        "report.pdf",
        samples.text_pdf("Quarterly report\nRevenue grew by 12%."),
        ("Quarterly report", "Revenue grew by 12%."),
        samples.blank_pdf(),
    ),
    Case(
        "docx",
        "report.docx",
        samples.docx_bytes(_good_docx),
        (
            "# Quarterly report",
            "# Revenue",
            "Revenue grew by 12% in the third quarter.",
            "North | 15%",
        ),
        samples.docx_bytes(lambda document: document.add_paragraph("   ")),
    ),
]
