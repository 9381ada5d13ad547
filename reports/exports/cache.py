"""Converted reports, kept in the report store next to the saved Markdown.

Keyed by the Markdown's sha256, the format and the converters' version: one file per
report, format and version at most, each no bigger than its conversion of a report under
the report cap (those of earlier versions stay in the store, never read again). A reader
sees a file whole or not at all (reports.storage).
"""

from __future__ import annotations

from django.core.files.base import ContentFile
from django.core.files.storage import storages

# Raised whenever what a conversion makes changes, so that a report converted before is
# converted again, not served as the earlier converters made it. 2: text nested past the
# deepest level laid out kept; Japanese and Korean drawn and marked in their language. 3:
# a Word citation links to its entry in the Sources list. 4: Traditional Chinese drawn and
# marked as such.
VERSION = 4


def _name(sha256: str, fmt: str) -> str:
    return f"exports/v{VERSION}/{sha256}.{fmt}"


def read(sha256: str, fmt: str) -> bytes | None:
    """Return the kept conversion, or None when there is none yet."""
    store = storages["reports"]
    try:
        with store.open(_name(sha256, fmt), "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def save(sha256: str, fmt: str, data: bytes) -> None:
    store = storages["reports"]
    name = _name(sha256, fmt)
    if not store.exists(name):
        store.save(name, ContentFile(data))
