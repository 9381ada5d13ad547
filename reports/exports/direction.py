"""Which way a block of text reads, as `dir="auto"` decides it: by its first letter of a
strong direction (Unicode's bidirectional algorithm, rule P2). Arabic and Hebrew read right
to left; digits, punctuation and spaces decide nothing."""

from __future__ import annotations

import unicodedata

_STRONG = {"L": "ltr", "R": "rtl", "AL": "rtl"}


def first_strong(text: str) -> str | None:
    """Return "rtl" or "ltr" after the text's first strongly directed letter, None without one."""
    for char in text:
        direction = _STRONG.get(unicodedata.bidirectional(char))
        if direction:
            return direction
    return None
