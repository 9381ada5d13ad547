from __future__ import annotations

import zipfile

import pytest
from docx.document import Document
from docx.text.paragraph import Paragraph

from reports.parsers import InvalidContent, ParseError, UnsupportedContent
from reports.parsers import docx as docx_parser
from reports.parsers.docx import DocxParser
from tests.parsers import samples

parser = DocxParser()


def _structured(document: Document) -> None:
    document.add_heading("The title", 0)
    document.add_heading("Chapter", 1)
    document.add_paragraph("Body text.")
    document.add_heading("Section", 2)
    document.add_heading("Deep", 9)
    document.add_paragraph("First point", style="List Bullet")
    document.add_paragraph("First step", style="List Number")
    document.add_paragraph("")
    table = document.add_table(rows=2, cols=3)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Merged"
    table.cell(0, 2).text = "Right"
    table.cell(1, 0).text = "a"
    table.cell(1, 2).add_table(rows=1, cols=2).cell(0, 1).text = "nested"
    document.add_paragraph("After the table.")


STRUCTURED = samples.docx_bytes(_structured)


def test_headings_become_markdown_heading_lines_in_document_order() -> None:
    assert parser.extract(STRUCTURED) == (
        "# The title\n\n## Chapter\n\nBody text.\n\n### Section\n\n###### Deep\n\n"
        "- First point\n\n1. First step\n\n"
        # The merged cell says its text once; the column it alone fills is not repeated.
        "| Merged | Right |\n| --- | --- |\n| a | nested |\n\nAfter the table."
    )


def test_a_document_with_only_empty_paragraphs_contains_no_text() -> None:
    empty = samples.docx_bytes(lambda document: document.add_paragraph(""))

    parser.check(empty)
    with pytest.raises(ParseError, match="contains no text"):
        parser.extract(empty)


def _zip_bomb() -> bytes:
    # 50 MB of zeros deflates to about 50 KB: a ratio near 1000.
    return samples.rezip(STRUCTURED, add={"word/media/zeros.bin": bytes(50 * 1024 * 1024)})


def test_a_highly_compressed_entry_is_a_zip_bomb() -> None:
    bomb = _zip_bomb()
    assert len(bomb) < 1024 * 1024

    with pytest.raises(InvalidContent, match="zip bomb"):
        parser.check(bomb)
    with pytest.raises(ParseError, match="zip bomb"):
        parser.extract(bomb)


def test_too_much_uncompressed_content_is_a_zip_bomb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(docx_parser, "MAX_UNCOMPRESSED_BYTES", len(STRUCTURED))

    with pytest.raises(InvalidContent, match="zip bomb"):
        parser.check(STRUCTURED)


def test_too_many_entries_is_a_zip_bomb() -> None:
    crowded = samples.rezip(
        STRUCTURED, add={f"extra/part{index}.xml": b"<a/>" for index in range(1000)}
    )

    with pytest.raises(InvalidContent, match="zip bomb"):
        parser.check(crowded)


def test_a_small_repetitive_part_is_not_mistaken_for_a_bomb() -> None:
    padded = samples.rezip(STRUCTURED, add={"extra/padding.xml": b"<a/>" * 100_000})

    parser.check(padded)


@pytest.mark.parametrize(
    "data",
    [
        samples.zip_of({"hello.txt": b"just a zip"}),
        samples.zip_of({"[Content_Types].xml": b"<Types/>", "xl/workbook.xml": b"<workbook/>"}),
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504),
        b"Plain text with a .docx name",
    ],
    ids=["plain-zip", "xlsx", "legacy-doc", "text"],
)
def test_anything_but_a_word_archive_is_unsupported(data: bytes) -> None:
    with pytest.raises(UnsupportedContent):
        parser.check(data)


def test_a_broken_archive_is_invalid() -> None:
    with pytest.raises(InvalidContent, match="damaged"):
        parser.check(STRUCTURED[: len(STRUCTURED) // 2])


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_xml_declaring_entities_is_refused_before_any_xml_parser_sees_it(encoding: str) -> None:
    with zipfile.ZipFile(samples.io.BytesIO(STRUCTURED)) as archive:
        xml = archive.read("word/document.xml").decode()
    header, body = xml.split("?>", 1)
    tricked = f'{header}?><!DOCTYPE w:document [<!ENTITY boom "boom">]>{body}'
    data = samples.rezip(STRUCTURED, replace={"word/document.xml": tricked.encode(encoding)})

    with pytest.raises(InvalidContent, match="DOCTYPE or ENTITY"):
        parser.check(data)
    with pytest.raises(ParseError, match="DOCTYPE or ENTITY"):
        parser.extract(data)


def test_a_docx_whose_xml_is_broken_is_a_parse_error() -> None:
    data = samples.rezip(STRUCTURED, replace={"word/document.xml": b"<w:document><unclosed"})

    parser.check(data)
    with pytest.raises(ParseError, match="could not be read"):
        parser.extract(data)


def test_each_style_is_looked_up_once_however_long_the_document(monkeypatch) -> None:
    # python-docx goes through every style of the document to find one: done per paragraph,
    # that made a long document take minutes to read.
    def _long(document: Document) -> None:
        document.add_heading("Tides", 1)
        for n in range(300):
            document.add_paragraph(f"Reading {n} of the gauge.")
            document.add_paragraph(f"Point {n}", style="List Bullet")

    lookups = []
    style = Paragraph.style
    monkeypatch.setattr(
        Paragraph, "style", property(lambda p: lookups.append(1) or style.fget(p), style.fset)
    )

    text = docx_parser.document_text(samples.docx_bytes(_long))

    assert text.count("- Point") == 300
    assert text.startswith("## Tides\n\nReading 0 of the gauge.")
    assert len(lookups) <= 3
