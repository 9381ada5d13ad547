"""The report as a standalone HTML page: the page's own rendering, an inline stylesheet, no script.

Citations link to their entries in the report's Sources section, within the file, since
the task's source pages are not there when the file is opened on its own. The page's
template is read by an engine of its own, so that the sandbox's child, which has no
settings, can render it.
"""

from __future__ import annotations

import base64
import re
from html import unescape
from pathlib import Path

from django.template import Context, Engine

from reports.rendering import render_markdown

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
_engine = Engine(dirs=[str(TEMPLATES)])

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
        sources = _SOURCE_ENTRY.sub(r'<\1 id="source-\2"><a href="#source-\2"', sources)
        body = text + heading + sources
    title = _TITLE.search(body)
    context = {"title": unescape(_TAG.sub("", title.group(1))) if title else "Report", "body": body}
    return _engine.get_template("reports/export.html").render(Context(context))


def in_child(markdown: bytes) -> str:
    """Return the page of the Markdown bytes, as base64 text (the sandbox's entry)."""
    return base64.b64encode(standalone(markdown.decode("utf-8")).encode("utf-8")).decode("ascii")
