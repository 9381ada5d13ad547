"""PDF: the text layer of every page, read with pypdf in a limited child process."""

from __future__ import annotations

import io
import re

from pypdf import PasswordType, PdfReader

from reports.parsers import sandbox
from reports.parsers.base import InvalidContent, ParseError, Parser, UnsupportedContent
from reports.parsers.text import EMPTY

SIGNATURE = b"%PDF-"
# The PDF specification lets a file carry some bytes before its header; readers look this far.
SIGNATURE_WINDOW = 1024

PROTECTED = "The PDF is password-protected; upload a copy without a password."
NO_TEXT_LAYER = (
    "The PDF has no text layer (it may be a scanned image); "
    "upload a PDF with selectable text, or run it through OCR first."
)
UNREADABLE = "The PDF could not be read; it may be damaged. Try saving or exporting it again."
_SURROGATE = re.compile("[\ud800-\udfff]")


class PdfParser(Parser):
    extensions = (".pdf",)
    media_type = "application/pdf"
    version = "2"

    def check(self, data: bytes) -> None:
        if not data.strip():
            raise InvalidContent(EMPTY)
        if SIGNATURE not in data[:SIGNATURE_WINDOW]:
            raise UnsupportedContent("The file is not a PDF document.")

    def extract(self, data: bytes) -> str:
        if SIGNATURE not in data[:SIGNATURE_WINDOW]:
            raise ParseError(UNREADABLE)
        pages = sandbox.run(f"{__name__}.page_texts", data, sandbox.Limits.from_settings())
        text = "\n\n".join(page for page in pages if page)
        if not text:
            raise ParseError(NO_TEXT_LAYER)
        return text


def page_texts(data: bytes) -> list[str]:
    """Return the text of every page; run in the sandbox's child process."""
    try:
        return _page_texts(data)
    except (ParseError, MemoryError):
        raise  # the sandbox answers MemoryError as a document too big to read
    except Exception:
        # pypdf raises many kinds of exception on malformed files (its own, but also
        # KeyError, ValueError, …); every one means the same thing to the user.
        raise ParseError(UNREADABLE) from None


def _page_texts(data: bytes) -> list[str]:
    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        # Many PDFs are encrypted only to restrict printing or editing, with an empty
        # password for reading; those open as usual.
        try:
            opened = reader.decrypt("") != PasswordType.NOT_DECRYPTED
        except Exception:
            opened = False
        if not opened:
            raise ParseError(PROTECTED)
    return [_clean(page.extract_text() or "") for page in reader.pages]


def _clean(text: str) -> str:
    # A PDF's text can hold NUL and lone surrogates (from broken UTF-16 strings); neither
    # may reach the database.
    text = _SURROGATE.sub("\ufffd", text.replace("\x00", ""))
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()
