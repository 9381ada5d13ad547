"""The report as PDF: WeasyPrint lays out the standalone HTML page, page numbers and all.

`in_child` runs in the sandbox's child process (reports.exports), which hands it the
Markdown and reads back the PDF as base64 text.
"""

from __future__ import annotations

import base64

from reports.exports import html


def _refuse(url: str, timeout: int = 10, ssl_context=None) -> dict:
    # The page needs nothing from outside; a link or image must never become a request.
    raise ValueError(f"not fetched: {url}")


def render(page: str) -> bytes:
    """Return the PDF of a standalone HTML page."""
    from weasyprint import HTML  # loads Pango: only in the child that converts

    return HTML(string=page, url_fetcher=_refuse).write_pdf()


def in_child(markdown: bytes) -> str:
    """Return the PDF of the Markdown bytes, as base64 text (the sandbox's entry)."""
    return base64.b64encode(render(html.standalone(markdown.decode("utf-8")))).decode("ascii")
