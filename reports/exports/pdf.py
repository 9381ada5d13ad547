"""The report as PDF: WeasyPrint lays out the standalone HTML page, page numbers and all.

`in_child` runs in the sandbox's child process (reports.exports), which hands it the
Markdown and reads back the PDF as base64 text.
"""

from __future__ import annotations

import base64
import re

from reports.exports import html

# A numbered list that goes on from an earlier one ("3. …" after a paragraph broke it)
# comes out of the renderer as <ol start="3">. Browsers and Word number it from 3;
# WeasyPrint numbers every list from 1, whatever its start, but honours the list-item
# counter: set where the list starts, it numbers the list as written.
_NUMBERED_FROM = re.compile(r'<ol start="(\d+)">')


def _refuse(url: str, timeout: int = 10, ssl_context=None) -> dict:
    # The page needs nothing from outside; a link or image must never become a request.
    raise ValueError(f"not fetched: {url}")


def render(page: str) -> bytes:
    """Return the PDF of a standalone HTML page."""
    from weasyprint import HTML  # loads Pango: only in the child that converts

    return HTML(string=_numbered_as_written(page), url_fetcher=_refuse).write_pdf()


def _numbered_as_written(page: str) -> str:
    return _NUMBERED_FROM.sub(
        lambda m: f'<ol start="{m[1]}" style="counter-reset: list-item {int(m[1]) - 1}">', page
    )


def in_child(markdown: bytes) -> str:
    """Return the PDF of the Markdown bytes, as base64 text (the sandbox's entry)."""
    return base64.b64encode(render(html.standalone(markdown.decode("utf-8")))).decode("ascii")
