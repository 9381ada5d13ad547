"""The report as a standalone HTML page: the page's own rendering, an inline stylesheet, no script.

Citations link to their entries in the report's Sources section, within the file, since
the task's source pages are not there when the file is opened on its own.
"""

from __future__ import annotations

import re
from html import unescape

from django.template.loader import render_to_string

from reports.rendering import render_markdown

_CITATION_HREF = re.compile(r'href="sources/(S\d+)/"')
_SOURCES_HEADING = "<h2>Sources</h2>"
_SOURCE_ENTRY = re.compile(r'<(li|p)><a href="#source-(S\d+)"')
_TITLE = re.compile(r"<h1>(.*?)</h1>", re.S)
_TAG = re.compile(r"<[^>]+>")


def standalone(markdown: str) -> str:
    """Return the report as a whole HTML page that needs nothing else to be read or printed."""
    body = _CITATION_HREF.sub(r'href="#source-\1"', render_markdown(markdown))
    text, heading, sources = body.rpartition(_SOURCES_HEADING)
    if heading:
        body = (
            text + heading + _SOURCE_ENTRY.sub(r'<\1 id="source-\2"><a href="#source-\2"', sources)
        )
    title = _TITLE.search(body)
    return render_to_string(
        "reports/export.html",
        {"title": unescape(_TAG.sub("", title.group(1))) if title else "Report", "body": body},
    )
