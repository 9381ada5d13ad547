"""Markdown: parsed into blocks, so that what reaches a report is the text a reader sees.

Link text is kept and its address dropped; images (badges, logos) and raw HTML tags are
not prose; code stays code, in fences.
"""

from __future__ import annotations

from markdown_it.token import Token

from reports.parsers import markdown_depth, sandbox
from reports.parsers.base import ParseError
from reports.parsers.html import html_to_text
from reports.parsers.tables import markdown_table
from reports.parsers.text import NO_TEXT, TextParser, decode_for_extract, fenced

_MARKDOWN = markdown_depth.parser("commonmark").enable(["table", "strikethrough"])
# Link addresses are dropped, never followed or shown: each one is parsed, but neither
# normalised nor vetted (a fifth of the time a README full of links takes to parse), and a
# link to a refused address still keeps just its text.
_MARKDOWN.normalizeLink = str
_MARKDOWN.validateLink = lambda _url: True


def markdown_to_text(markdown: str) -> str:
    """Return `markdown` as structured text: headings as "#" lines, lists, pipe tables,
    fences."""
    blocks: list[str] = []
    lists: list[str] = []  # the open lists' markers, innermost last
    rows: list[list[str]] = []  # the table being read
    heading = 0  # the level of the heading being read, 0 outside one
    in_cell = item_opened = False
    for token in _MARKDOWN.parse(markdown):
        kind = token.type
        if kind == "heading_open":
            heading = int(token.tag[1])
        elif kind == "heading_close":
            heading = 0
        elif kind in ("bullet_list_open", "ordered_list_open"):
            lists.append("-" if kind == "bullet_list_open" else "1.")
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists.pop()
        elif kind == "list_item_open":
            item_opened = True
        elif kind in ("th_open", "td_open"):
            in_cell = True
        elif kind in ("th_close", "td_close"):
            in_cell = False
        elif kind == "tr_open":
            rows.append([])
        elif kind == "table_close":
            if table := markdown_table(rows):
                blocks.append(table)
            rows = []
        elif kind == "inline" and in_cell:
            rows[-1].append(_inline_text(token))
        elif kind == "inline" and (text := _inline_text(token)):
            if heading:
                blocks.append("#" * heading + " " + text)
            elif lists:
                marker = lists[-1] if item_opened else " " * len(lists[-1])
                blocks.append("  " * (len(lists) - 1) + f"{marker} {text}")
                item_opened = False
            else:
                blocks.append(text)
        elif kind in ("fence", "code_block"):
            code = token.content.rstrip("\n")
            if code.strip():
                blocks.append(fenced(code))
        elif kind == "html_block" and (text := html_to_text(token.content)):
            blocks.append(text)
    return _join(blocks)


def _inline_text(token: Token) -> str:
    parts: list[str] = []
    for child in token.children or ():
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        # Images (badges, logos) and inline HTML tags are not prose; a link keeps its text.
    return " ".join("".join(parts).split())


def _join(blocks: list[str]) -> str:
    # List items stay on consecutive lines; other blocks (a table too) are paragraphs.
    out: list[str] = []
    previous = None
    for block in blocks:
        kind = _line_kind(block)
        if out:
            out.append("\n" if kind is not None and kind == previous else "\n\n")
        out.append(block)
        previous = kind
    return "".join(out)


def _line_kind(block: str) -> str | None:
    if block.lstrip().startswith(("- ", "1. ")):
        return "item"
    return None


class MarkdownParser(TextParser):
    """Checked as text; read as Markdown."""

    extensions = (".md",)
    media_type = "text/markdown"
    version = "4"

    def extract(self, data: bytes) -> str:
        # A crafted text can make a Markdown parser's time grow much faster than its size:
        # it is read in the sandbox, under its limits, like PDF and .docx.
        return sandbox.run(f"{__name__}.document_text", data, sandbox.Limits.from_settings())


def document_text(data: bytes) -> str:
    """Return the document's structured text; run in the sandbox's child process."""
    text = markdown_to_text(decode_for_extract(data))
    if not text.strip():
        raise ParseError(NO_TEXT)
    return text
