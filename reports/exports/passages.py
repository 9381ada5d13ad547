"""A download that carries the passages its report cites (`?passages=1`, docs/api.md).

A file read away from the site cannot open a citation's passage: with this option the
report's Markdown gains, after its Sources, a section that quotes each passage the Sources
list, in passage order, under its id, file and place, so that every statement can be
checked against its passage in the file itself. Each converter renders that section as
the rest of the report. The saved Markdown is not changed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from reports.parsers.passages import Passage

HEADING = "Passages cited"
# The Sources section's entries, as reports.validation writes them.
_SOURCES = re.compile(r"^## Sources[ \t]*$", re.M)
_ENTRY = re.compile(r"^- S([1-9]\d*) \u2014 ", re.M)
# A heading of the passage: in the quote, its words in bold, not a heading of the report.
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(.*?)[ \t#]*$", re.M)
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~&!])")


def cited(markdown: str) -> list[int]:
    """Return the numbers of the passages the report's Sources section lists, in order."""
    found = list(_SOURCES.finditer(markdown))
    if not found:
        return []
    return sorted({int(n) for n in _ENTRY.findall(markdown[found[-1].end() :])})


def appended(markdown: str, passages: Iterable[Passage]) -> str:
    """Return the report with its cited passages quoted at its end; the report as it is
    when it cites none."""
    quoted = [_quoted(passage) for passage in passages]
    if not quoted:
        return markdown
    return markdown.rstrip() + f"\n\n## {HEADING}\n\n" + "\n\n".join(quoted) + "\n"


def _quoted(passage) -> str:
    place = [_escaped(passage.document)]
    if passage.section:
        place.append(_escaped(passage.section))
    if passage.page:
        place.append(f"page {passage.page}")
    text = _HEADING.sub(r"**\1**", passage.text.replace("\r", ""))
    lines = "\n".join(f"> {line}".rstrip() for line in text.split("\n"))
    return f"### S{passage.number} — {', '.join(place)}\n\n{lines}"


def _escaped(text: str) -> str:
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(text.split()))
