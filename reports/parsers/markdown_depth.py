"""Markdown parsers that keep the text nested deeper than they lay out.

markdown-it stops opening blocks at a nesting depth (`maxNesting`, which bounds its
recursion) and drops, without a word, every line from there to the end of the enclosing
block: a list nested ten deep lost its tenth item's words and all under them. Every parser
of report or upload Markdown is made by `parser`: from DEEPEST block levels down (a list
item's content is two levels below its list's, a quote's one below it: the content of a
tenth nested list's items, or of a twentieth quote) no block is opened any more, and the
lines found there are kept as the text they are, markers and all, each line of the source
on a line of its own (a hard line break between them) in the deepest block laid out.
However deep a crafted text nests, the parse recurses no deeper than that, and reads each
line a bounded number of times.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock, paragraph

DEEPEST = 20  # markdown-it's own limit in the CommonMark preset, as before
# A list opened at DEEPEST - 1 holds blocks at DEEPEST + 1: markdown-it's own cut-off, which
# drops them, must lie past that.
_MAX_NESTING = DEEPEST + 2
# A hard line break, as Markdown writes one: two spaces at the end of a line.
_HARD_BREAK = "  \n"


def parser(preset: str = "commonmark", options: Mapping[str, Any] | None = None) -> MarkdownIt:
    """Return a MarkdownIt of `preset` and `options` that drops no text nested too deep."""
    md = MarkdownIt(preset, {**(options or {}), "maxNesting": _MAX_NESTING})
    md.block.ruler.before("table", "deep_text", _deep_text)
    return md


def _deep_text(state: StateBlock, start_line: int, end_line: int, silent: bool) -> bool:
    """At DEEPEST levels or more, read the lines up to a blank one or the block's end as one
    paragraph of plain lines (where a line that would open a block ends the paragraph
    before it, markdown-it's own paragraph rule decides)."""
    if state.level < DEEPEST:
        return False
    lines = []
    line = start_line
    while line < end_line and not state.isEmpty(line) and state.sCount[line] >= state.blkIndent:
        paragraph(state, line, end_line, silent)
        lines.append(state.tokens[-2].content)
        del state.tokens[-3:]
        line = state.line
    opening = state.push("paragraph_open", "p", 1)
    opening.map = [start_line, line]
    inline = state.push("inline", "", 0)
    inline.content = "\n".join(lines).replace("\n", _HARD_BREAK)
    inline.map = [start_line, line]
    inline.children = []
    state.push("paragraph_close", "p", -1)
    return True
