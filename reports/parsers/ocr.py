"""Scanned PDF pages read by OCR: Tesseract (Debian's `tesseract-ocr`, English) on the
page as PDFium renders it, in the parse sandbox's child.

A page is scanned when its text layer holds almost nothing (fewer than MIN_TEXT_CHARS
characters other than spaces) and images cover at least SCAN_SHARE of it (a cover page with
a title and a logo is not a scan). Each such page costs a render, in
grayscale at DPI (fewer dots for a page too big to render whole within MAX_PIXELS), and one
`tesseract` run: a second or two of one core for a page of text. Tesseract inherits the
child's rlimits, niceness and process group (reports/parsers/sandbox.py), runs one thread,
and is ended after PAGE_S; the parse's wall-clock limit grows by PAGE_S for each page to
read. A document with more than MAX_PAGES such pages is refused before any is read.
"""

from __future__ import annotations

import itertools
import os
import subprocess

import pypdfium2
import pypdfium2.raw as pdfium_c

from reports.parsers.base import ParseError

LANGUAGE = "eng"
DPI = 250
MAX_PIXELS = 25_000_000  # an A3 page at 300 dpi is about 17 million
MIN_TEXT_CHARS = 20
SCAN_SHARE = 0.5
# A page's images looked at, at most, to find its share covered (a scan is one image, or a
# few strips).
MAX_IMAGES = 64
MAX_PAGES = 50
PAGE_S = 20  # one page's Tesseract run, and what it adds to the parse's wall-clock limit

TOO_MANY = (
    "The PDF has {count} scanned pages without a text layer; at most {limit} are read by OCR. "
    "Split it, or upload a PDF with selectable text."
)
UNAVAILABLE = (
    "The PDF has no text layer (it may be a scanned image) and this server cannot read scans "
    "by OCR; upload a PDF with selectable text, or run it through OCR first."
)
PAGE_TOO_SLOW = "OCR took too long to read page {page}; the scan may be damaged or too large."


def is_scanned(page: pypdfium2.PdfPage, text: str) -> bool:
    """Whether the page's text layer is (almost) empty while images cover much of it."""
    if sum(not c.isspace() for c in text) >= MIN_TEXT_CHARS:
        return False
    width, height = page.get_size()
    covered = 0.0
    images = page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,))
    for image in itertools.islice(images, MAX_IMAGES):
        left, bottom, right, top = image.get_bounds()
        covered += max(right - left, 0) * max(top - bottom, 0)
    return covered >= SCAN_SHARE * width * height


def page_text(page: pypdfium2.PdfPage, number: int) -> str:
    """Return the text Tesseract reads on the page (1-based `number`, for messages): lines
    as it found them, a blank line between its paragraphs."""
    width, height = page.get_size()
    scale = min(DPI / 72, (MAX_PIXELS / max(width * height, 1.0)) ** 0.5)
    image = page.render(scale=scale, grayscale=True).to_pil()
    # Imported here: only a child that meets a scan needs it.
    import pytesseract

    # One thread: the machine's other cores carry the servers and the other parses.
    os.environ["OMP_THREAD_LIMIT"] = "1"
    try:
        return pytesseract.image_to_string(image, lang=LANGUAGE, timeout=PAGE_S)
    except pytesseract.TesseractNotFoundError:
        raise ParseError(UNAVAILABLE) from None
    except RuntimeError as exc:  # pytesseract's word for its timeout
        if "timeout" in str(exc).lower():
            raise ParseError(PAGE_TOO_SLOW.format(page=number)) from None
        raise
    except (pytesseract.TesseractError, subprocess.SubprocessError, OSError):
        # Tesseract failed on the image: killed at its CPU or memory limit, or the image
        # is one it cannot read. The page then has no text, as it had no text layer.
        return ""
