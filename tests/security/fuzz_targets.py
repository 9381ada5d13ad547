"""What each fuzzed function promises, one checker per target, shared by the hypothesis
tests (tests/security/test_fuzz.py) and the atheris harness (tests/security/fuzz_atheris.py).

Every checker takes bytes and fails with AssertionError (or an unexpected exception) when a
promise is broken: a parser raises only its documented errors and returns text without NUL
or carriage returns; rendering never lets markup through; names come out clean.
"""

from __future__ import annotations

import contextlib
import io
import zipfile

from reports.parsers import docx, html, parser_for, pdf
from reports.parsers.base import InvalidContent, ParseError, UnsupportedContent
from reports.rendering import render_markdown
from reports.serving.upload_names import user_file_name
from reports.submissions.form import display_name
from reports.validation import validate_report
from tests.parsers import samples
from tests.security.hostile import assert_inert

SUBMIT_ERRORS = (InvalidContent, UnsupportedContent)


def _clean(text: str) -> None:
    """Text fit for the database and for display: no NUL, no lone surrogate, no CR."""
    assert "\x00" not in text and "\r" not in text
    assert not any("\ud800" <= ch <= "\udfff" for ch in text)


def check_text_parser(data: bytes, extension: str = ".txt") -> None:
    """Submit-time check, then extraction (for HTML its in-process half: the sandbox runs it)."""
    parser = parser_for("x" + extension)
    with contextlib.suppress(SUBMIT_ERRORS):
        parser.check(data)
    extract = html.document_text if extension == ".html" else parser.extract
    try:
        _clean(extract(data))
    except ParseError as exc:
        assert str(exc)


def check_docx(data: bytes) -> None:
    """Submit-time check, then the in-process half of extraction (the sandbox runs it)."""
    try:
        parser_for("x.docx").check(data)
    except SUBMIT_ERRORS:
        return
    try:
        _clean(docx.document_text(data))
    except ParseError as exc:
        assert str(exc)


def check_pdf_pages(data: bytes) -> None:
    """The in-process half of the PDF parser (the sandbox runs it in a child)."""
    try:
        pdf.document_text(data)
    except ParseError as exc:
        assert str(exc)


def check_markdown(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    assert_inert(render_markdown(text))
    assert isinstance(validate_report(text, max_kb=200), list)


def check_display_name(data: bytes) -> None:
    kept = user_file_name(data.decode("utf-8", "replace"))
    if kept is None:
        return  # the multipart parser skips a part with no name: no file was chosen
    name = display_name(kept)
    assert name and len(name) <= 200
    # A backslash may be part of the name; it is never a folder on the server.
    assert "/" not in name and not name.startswith(("\\", "..\\"))
    assert all(ch.isprintable() for ch in name)


def mutate(seed: bytes, flips: list[tuple[int, int]]) -> bytes:
    """Return `seed` with some bytes replaced: positions wrap around its length."""
    data = bytearray(seed)
    for position, value in flips:
        data[position % len(data)] = value
    return bytes(data)


def flips_from(data: bytes) -> list[tuple[int, int]]:
    """Read raw fuzzer bytes as (position, value) flips: three bytes of position, one of value."""
    return [
        (int.from_bytes(data[i : i + 3], "big"), data[i + 3]) for i in range(0, len(data) - 3, 4)
    ]


def docx_with_damaged_xml(flips: list[tuple[int, int]]) -> bytes:
    """Return the seed .docx with bytes of its document part replaced, in a sound archive:
    the damage reaches the XML parser instead of stopping at the archive's checksums."""
    return samples.rezip(DOCX_SEED, replace={"word/document.xml": mutate(DOCUMENT_XML, flips)})


def _docx_seed() -> bytes:
    def build(document) -> None:
        document.add_heading("Fuzz", 1)
        document.add_paragraph("A paragraph of text for the fuzzer to break.")
        document.add_table(rows=2, cols=2).cell(0, 0).text = "cell"

    return samples.docx_bytes(build)


DOCX_SEED = _docx_seed()
with zipfile.ZipFile(io.BytesIO(DOCX_SEED)) as _archive:
    DOCUMENT_XML = _archive.read("word/document.xml")
PDF_SEED = samples.text_pdf("Fuzzing the PDF parser", "Second page")
