"""Is a report fit to save? The rules of docs/api.md, "A report is valid when…"."""

from __future__ import annotations

from markdown_it import MarkdownIt
from markdown_it.token import Token

# Headings are read from the token stream, so a `#` line inside a code fence is not one.
_md = MarkdownIt("commonmark")


def validate_report(text: str, *, max_kb: int) -> list[str]:
    """Return the report's problems as short sentences; an empty list means it is valid."""
    if not text.strip():
        return ["The report is empty."]
    problems = []
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        problems.append("The report contains characters that cannot be written as UTF-8.")
        size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_kb * 1024:
        problems.append(f"The report is {size / 1024:.0f} KiB; the limit is {max_kb} KiB.")

    tokens = _md.parse(text)
    headings = [(i, t) for i, t in enumerate(tokens) if t.type == "heading_open"]
    if not _starts_with_title(text, tokens):
        problems.append("The report does not begin with a level-1 heading (# Title).")

    sections = [(i, _heading_text(tokens, i)) for i, t in headings if t.tag == "h2"]
    summaries = [i for i, name in sections if name == "summary"]
    if not summaries:
        problems.append("The report has no “## Summary” section.")
    elif not _section_has_text(tokens, summaries[0]):
        problems.append("The Summary section has no text.")
    if not any(name != "summary" for _, name in sections):
        problems.append("The report has no level-2 section besides the Summary.")
    return problems


def _starts_with_title(text: str, tokens: list[Token]) -> bool:
    if not tokens:
        return False
    first = tokens[0]
    if first.type != "heading_open" or first.tag != "h1" or first.markup != "#":
        return False
    # Blocks that leave no token (link reference definitions) may not come before it.
    # Split and call lines blank the way markdown-it does: only spaces and tabs are blank.
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    first_line = next((n for n, line in enumerate(lines) if line.strip(" \t")), -1)
    return first.map is not None and first.map[0] == first_line


def _heading_text(tokens: list[Token], index: int) -> str:
    return tokens[index + 1].content.strip().rstrip(":").strip().casefold()


def _section_has_text(tokens: list[Token], index: int) -> bool:
    # tokens[index + 1] is the heading's inline content, tokens[index + 2] its close.
    for token in tokens[index + 3 :]:
        if token.type == "heading_open":
            return False
        if token.content.strip():
            return True
    return False
