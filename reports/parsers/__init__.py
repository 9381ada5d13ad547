"""Find the parser for an uploaded file by its name.

Parser modules are imported only when a file of their type turns up, so that a process that
never sees a PDF never loads PDFium.
"""

from __future__ import annotations

import functools
import os

from django.utils.module_loading import import_string

from reports.parsers.base import InvalidContent, ParseError, Parser, UnsupportedContent

__all__ = [
    "PARSER_VERSION",
    "SUPPORTED_EXTENSIONS",
    "InvalidContent",
    "ParseError",
    "Parser",
    "UnsupportedContent",
    "parser_for",
]

_PARSER_PATHS: dict[str, str] = {
    ".txt": "reports.parsers.text.TextParser",
    ".md": "reports.parsers.markdown.MarkdownParser",
    ".html": "reports.parsers.html.HtmlParser",
    ".pdf": "reports.parsers.pdf.PdfParser",
    ".docx": "reports.parsers.docx.DocxParser",
}

SUPPORTED_EXTENSIONS: tuple[str, ...] = tuple(_PARSER_PATHS)


def extension_of(filename: str) -> str:
    """Return the lower-cased extension of `filename`, with its dot ("" when there is none)."""
    return os.path.splitext(filename.strip().lower())[1]


def parser_for(filename: str) -> Parser | None:
    path = _PARSER_PATHS.get(extension_of(filename))
    return None if path is None else _parser(path)


def readers_to_warm() -> tuple[str, ...]:
    """The readers a parse child is warmed with before it is first needed: the light ones
    (Markdown, HTML). Warmed with all five, an idle child held 42 MB instead of 23, and a
    small Markdown document took longer to read in it, not less."""
    return tuple(_PARSER_PATHS[ext].rpartition(".")[0] for ext in (".md", ".html"))


@functools.cache
def _parser(path: str) -> Parser:
    return import_string(path)()


@functools.cache
def _parser_version() -> str:
    # Every parser's version takes part, so that changing any one of them invalidates the
    # prepared text cached under this key.
    paths = dict.fromkeys(_PARSER_PATHS.values())
    return ",".join(f"{path.rsplit('.', 2)[-2]}={_parser(path).version}" for path in paths)


def __getattr__(name: str) -> str:
    # PARSER_VERSION is computed on first use: it needs every parser module, which the
    # rest of this package imports only on demand.
    if name == "PARSER_VERSION":
        return _parser_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
