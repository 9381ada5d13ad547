from __future__ import annotations

import pytest

from reports.parsers import InvalidContent, ParseError, UnsupportedContent, ocr
from reports.parsers.pdf import PdfParser
from tests.parsers import samples

parser = PdfParser()


def test_lines_join_into_a_paragraph_that_goes_on_across_pages() -> None:
    pdf = samples.text_pdf("Page one\nsecond line", "Page two (café)")

    # The form feed marks where the second page begins, inside the paragraph.
    assert parser.extract(pdf) == "Page one second line \fPage two (café)"


def test_a_signature_after_some_leading_bytes_is_accepted() -> None:
    pdf = b"\r\n" * 100 + samples.text_pdf("Late header")

    parser.check(pdf)
    assert parser.extract(pdf) == "Late header"


@pytest.mark.parametrize(
    "data",
    [samples.PNG, b"plain text that is not a PDF", b"x" * 1024 + b"%PDF-1.4"],
    ids=["png", "text", "signature-too-late"],
)
def test_anything_without_the_signature_is_unsupported(data: bytes) -> None:
    with pytest.raises(UnsupportedContent, match="not a PDF"):
        parser.check(data)


def test_an_empty_file_is_invalid() -> None:
    with pytest.raises(InvalidContent, match="empty"):
        parser.check(b"")


def test_a_password_protected_pdf_cannot_be_parsed() -> None:
    pdf = samples.encrypted_pdf(samples.text_pdf("Secret text"), user_password="secret")

    parser.check(pdf)
    with pytest.raises(ParseError, match="password-protected"):
        parser.extract(pdf)


def test_a_pdf_encrypted_only_against_editing_is_read() -> None:
    pdf = samples.encrypted_pdf(samples.text_pdf("Readable text"), user_password="")

    assert parser.extract(pdf) == "Readable text"


@pytest.mark.parametrize(
    "pdf",
    [samples.image_pdf(), samples.blank_pdf(), samples.blank_scan_pdf()],
    ids=["image", "blank", "blank-scan"],
)
def test_a_pdf_without_a_text_layer_cannot_be_parsed(pdf: bytes) -> None:
    parser.check(pdf)
    with pytest.raises(ParseError, match="no text layer, and OCR found no text"):
        parser.extract(pdf)


def test_only_the_scanned_page_of_a_pdf_is_read_by_ocr() -> None:
    typed = samples.text_pdf("The budget review opened the meeting.")
    scanned = samples.scanned_pdf(
        "The harbour committee met on Tuesday.\n\nIt approved a lighthouse."
    )

    extracted = parser.read(samples.joined_pdf(typed, scanned))

    assert extracted.ocr_pages == (2,)
    # The scan's page keeps its place and its paragraphs.
    assert extracted.text == (
        "The budget review opened the meeting.\n\n\f\n\n"
        "The harbour committee met on Tuesday.\n\nIt approved a lighthouse."
    )


def test_a_pdf_with_more_scanned_pages_than_ocr_reads_is_refused_before_any_is_read() -> None:
    pdf = samples.blank_scan_pdf(ocr.MAX_PAGES + 1)
    with pytest.raises(ParseError, match=f"{ocr.MAX_PAGES + 1} scanned pages"):
        parser.extract(pdf)


@pytest.mark.parametrize(
    "pdf",
    [
        b"%PDF-1.4\n",
        b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 9 0 R >> endobj\ntrailer << /Root 1 0 R >>",
        samples.text_pdf("Cut short")[:200],
    ],
    ids=["header-only", "dangling-reference", "truncated"],
)
def test_a_damaged_pdf_is_a_parse_error_with_a_plain_message(pdf: bytes) -> None:
    with pytest.raises(ParseError, match=r"could not be read|no text layer"):
        parser.extract(pdf)
