"""PDF: positioned lines read with PDFium in a limited child, structured by `layout`; a
scanned page (no text layer, an image) read by OCR (`ocr`)."""

from __future__ import annotations

import ctypes
import re
from collections import Counter

import pypdfium2
import pypdfium2.raw as pdfium_c

from reports.parsers import ocr, pdf_tables, sandbox
from reports.parsers.base import Extracted, InvalidContent, ParseError, Parser, UnsupportedContent
from reports.parsers.layout import Line, OutlineEntry, structure
from reports.parsers.text import EMPTY

SIGNATURE = b"%PDF-"
# The PDF specification lets a file carry some bytes before its header; readers look this far.
SIGNATURE_WINDOW = 1024

PROTECTED = "The PDF is password-protected; upload a copy without a password."
NO_TEXT_LAYER = (
    "The PDF has no text layer, and OCR found no text in it (a scan may be blank, faint or "
    "too small to read); upload a PDF with selectable text, or a clearer scan."
)
UNREADABLE = "The PDF could not be read; it may be damaged. Try saving or exporting it again."
_SURROGATE = re.compile("[\ud800-\udfff]")
# PDFium's error code for a password it was not given.
_PASSWORD_ERROR = 4
MAX_OUTLINE_ENTRIES = 2000
_FIXED_PITCH = 1  # bit 1 of a PDF font descriptor's flags
_BOLD_WEIGHT = 600
_BOLD_NAME = re.compile(r"bold|black|heavy|semibold|-bd|cmbx|bol\b|-bol", re.IGNORECASE)
_MONO_NAME = re.compile(r"mono|courier|typewriter|cmtt|consol|menlo|code", re.IGNORECASE)
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
# How OCR's lines are placed for `layout`: a page of text at an ordinary size and spacing.
_OCR_SIZE = 10.0
_OCR_SPACING = 1.2
_OCR_PAGE_TOP = 792.0


class PdfParser(Parser):
    extensions = (".pdf",)
    media_type = "application/pdf"
    version = "7"

    def check(self, data: bytes) -> None:
        if not data.strip():
            raise InvalidContent(EMPTY)
        if SIGNATURE not in data[:SIGNATURE_WINDOW]:
            raise UnsupportedContent("The file is not a PDF document.")

    def extract(self, data: bytes) -> str:
        return self.read(data).text

    def read(self, data: bytes) -> Extracted:
        if SIGNATURE not in data[:SIGNATURE_WINDOW]:
            raise ParseError(UNREADABLE)
        # Each scanned page may add its OCR time to the wall-clock limit.
        limits = sandbox.Limits.from_settings().with_extra_wall(ocr.MAX_PAGES * ocr.PAGE_S)
        answer = sandbox.run(f"{__name__}.document_text", data, limits)
        return Extracted(answer["text"], tuple(answer["ocr_pages"]))


def document_text(data: bytes) -> dict:
    """Return the document's structured text, and the (1-based) pages read by OCR; run in
    the sandbox's child process."""
    try:
        document = pypdfium2.PdfDocument(data)
    except pypdfium2.PdfiumError as exc:
        if getattr(exc, "err_code", None) == _PASSWORD_ERROR:
            # Documents encrypted only to restrict printing or editing open with no password.
            raise ParseError(PROTECTED) from None
        raise ParseError(UNREADABLE) from None
    try:
        pages, scanned = [], []
        for number in range(len(document)):
            page = document[number]
            pages.append(_page_lines(page))
            if ocr.is_scanned(page, "".join(line.text for line in pages[-1])):
                scanned.append(number)
        ocr_pages = _read_scans(document, pages, scanned)
        outline = _outline(document)
        title = document.get_metadata_dict().get("Title", "")
    except (ParseError, MemoryError):
        raise  # the sandbox answers MemoryError as a document too big to read
    except Exception:
        # PDFium reports a malformed part in several ways; each means the same to the user.
        raise ParseError(UNREADABLE) from None
    if not any(line.text.strip() for page in pages for line in page):
        raise ParseError(NO_TEXT_LAYER)
    return {"text": _clean(structure(pages, outline, title)), "ocr_pages": ocr_pages}


def _read_scans(
    document: pypdfium2.PdfDocument, pages: list[list[Line]], scanned: list[int]
) -> list[int]:
    """Read the `scanned` pages (0-based) by OCR, in place in `pages`; return the 1-based
    numbers of those on which OCR found text."""
    if len(scanned) > ocr.MAX_PAGES:
        raise ParseError(ocr.TOO_MANY.format(count=len(scanned), limit=ocr.MAX_PAGES))
    # OCR's lines take the body text's size, so that they make no headings beside it.
    sizes = Counter(line.size for lines in pages for line in lines)
    size = sizes.most_common(1)[0][0] if sizes else _OCR_SIZE
    read = []
    for number in scanned:
        sandbox.tell(
            f"Reading page {number + 1} of {len(pages)} by OCR",
            more_wall_s=len(scanned) * ocr.PAGE_S,
        )
        lines = _ocr_lines(ocr.page_text(document[number], number + 1), size)
        if lines:
            pages[number] = lines
            read.append(number + 1)
    return read


def _ocr_lines(text: str, size: float) -> list[Line]:
    """Return OCR's text as a page's lines: a line's spacing apart, three between paragraphs
    (more than `layout` takes for a line's spacing)."""
    lines = []
    top = _OCR_PAGE_TOP
    for paragraph in _PARAGRAPH_BREAK.split(text.strip()):
        for raw in paragraph.splitlines():
            if raw.strip():
                lines.append(Line(text=raw.strip(), size=size, top=top, left=0.0))
                top -= size * _OCR_SPACING
        top -= 2 * size * _OCR_SPACING
    return lines


def _page_lines(page: pypdfium2.PdfPage) -> list[Line]:
    textpage = page.get_textpage()
    text = textpage.get_text_range()
    count = textpage.count_chars()
    name = ctypes.create_string_buffer(128)
    flags = ctypes.c_int()
    lines = []
    start = 0
    for raw in text.split("\r\n"):
        first = start + (len(raw) - len(raw.lstrip()))
        last = start + len(raw.rstrip()) - 1
        start += len(raw) + 2
        if not raw.strip() or last >= count:
            continue
        pdfium_c.FPDFText_GetFontInfo(textpage.raw, first, name, len(name), ctypes.byref(flags))
        font = name.value.decode("latin-1")
        weights = [pdfium_c.FPDFText_GetFontWeight(textpage.raw, i) for i in (first, last)]
        left, _bottom, _right, top = textpage.get_charbox(first)
        size = round(pdfium_c.FPDFText_GetFontSize(textpage.raw, first), 1)
        lines.append(
            Line(
                text=raw.strip(),
                size=size,
                top=top,
                left=left,
                bold=all(w >= _BOLD_WEIGHT for w in weights) or bool(_BOLD_NAME.search(font)),
                mono=bool(flags.value & _FIXED_PITCH) or bool(_MONO_NAME.search(font)),
                cells=pdf_tables.cells_of(textpage, first, last - first + 1, size),
            )
        )
    return lines


def _outline(document: pypdfium2.PdfDocument) -> list[OutlineEntry]:
    entries = []
    # get_toc guards against circular outlines; a hostile one is also cut at a count.
    for bookmark in document.get_toc(max_depth=6):
        if len(entries) >= MAX_OUTLINE_ENTRIES:
            break
        destination = bookmark.get_dest()
        page = destination.get_index() if destination is not None else None
        entries.append(
            OutlineEntry(bookmark.level, bookmark.get_title(), -1 if page is None else page)
        )
    return entries


def _clean(text: str) -> str:
    # A PDF's text can hold NUL and lone surrogates (from broken UTF-16 strings); neither
    # may reach the database.
    text = _SURROGATE.sub("\ufffd", text.replace("\x00", ""))
    # Strip spaces and line breaks only: a leading form feed is the mark of a page.
    return text.replace("\r\n", "\n").replace("\r", "\n").strip(" \n")
