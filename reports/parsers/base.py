"""The one interface every document parser implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


class UnsupportedContent(Exception):
    """The bytes are not what the file name says (answered 415)."""


class InvalidContent(Exception):
    """The file is of a supported type but unusable as input (answered 400)."""


class ParseError(Exception):
    """The document's text cannot be extracted; the message is shown to the user."""


@dataclass(frozen=True)
class Extracted:
    """A document's text, and how it was read."""

    text: str
    ocr_pages: tuple[int, ...] = ()  # the (1-based) pages read by OCR, not from a text layer


class Parser(ABC):
    """Check a document at submit time, and extract its text at parse time."""

    extensions: tuple[str, ...] = ()
    media_type: str = "application/octet-stream"
    version: str = "1"

    @abstractmethod
    def check(self, data: bytes) -> None:
        """Raise UnsupportedContent or InvalidContent when `data` cannot be accepted.

        Cheap checks only: content signature, decodability, archive sanity.
        """

    @abstractmethod
    def extract(self, data: bytes) -> str:
        """Return the document's text, or raise ParseError."""

    def read(self, data: bytes) -> Extracted:
        """Return the document's text and how it was read, or raise ParseError."""
        return Extracted(self.extract(data))
