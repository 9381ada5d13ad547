"""Is a report fit to save? The rules of docs/api.md, "A report is valid when…", and its
citations settled against the task's passages ("Citations and source passages")."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from markdown_it.token import Token

from reports.parsers import markdown_depth

# Headings are read from the token stream, so a `#` line inside a code fence is not one.
_md = markdown_depth.parser("commonmark")

# What a model writes as a citation, well formed ("[S12]", "[S3, S7]") or not ("[S12a]",
# "【S3】", "[S3; s7]"): brackets holding only ids of an S and a digit, so "[Sic]" is text.
# An escaped "\\[" is text, and "[S3](…)" a link.
CITATION_LIKE = re.compile(
    r"((?<=\S)[ \t]+)?(?<!\\)([\[\u3010\u3014])[ \t]*([Ss]\d\w*(?:[ \t]*[,;][ \t]*[Ss]\d\w*)*)"
    r"[ \t]*[\]\u3011\u3015](?!\()"
)
_ID_SEPARATOR = re.compile(r"[ \t]*[,;][ \t]*")
PASSAGE_ID = re.compile(r"S([1-9]\d*)")
_BACKTICKS = re.compile(r"`+")
_SOURCES_HEADING = "sources"
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~&!])")


def settle_citations(report: str, passages: Sequence) -> tuple[str, int]:
    """Remove every citation id that names none of `passages`, and end the report with its
    `## Sources`: each cited passage once, in order. Return the report and the count of
    ids removed.

    `passages` are reports.parsers.passages.Passage objects or rows with the same fields.
    Ids in code are not citations; a `## Sources` section the model wrote is replaced.
    """
    known = {passage.number: passage for passage in passages}
    # Lines as markdown-it counts them, so that its maps index them.
    lines = report.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    tokens = _md.parse("\n".join(lines))
    dropped = sources_lines(tokens, len(lines))
    code_lines = {
        line
        for token in tokens
        if token.type in {"fence", "code_block"} and token.map
        for line in range(*token.map)
    }
    cited: set[int] = set()
    removed = 0

    def settle(match: re.Match) -> str:
        nonlocal removed
        ids = _ID_SEPARATOR.split(match.group(3))
        kept = []
        for passage_id in ids:
            number = PASSAGE_ID.fullmatch(passage_id)
            if match.group(2) == "[" and number and int(number[1]) in known:
                kept.append(passage_id)
                cited.add(int(number[1]))
        removed += len(ids) - len(kept)
        # A citation removed whole takes the space before it along: "said. [S9999]".
        return f"{match.group(1) or ''}[{', '.join(kept)}]" if kept else ""

    # Each paragraph outside code blocks is settled in one piece, so that a code span
    # crossing a line break is skipped whole.
    settled: list[str] = []
    prose: list[str] = []
    for number, line in enumerate([*lines, None]):
        if number in dropped:
            continue
        if line is not None and line.strip(" \t") and number not in code_lines:
            prose.append(line)
            continue
        if prose:
            settled.append(_settle_paragraph("\n".join(prose), settle))
            prose = []
        if line is not None:
            settled.append(line)
    text = "\n".join(settled).rstrip() + _closing_fence(tokens, lines)
    return text + "\n\n" + _sources_section([known[n] for n in sorted(cited)]), removed


def _closing_fence(tokens: list[Token], lines: list[str]) -> str:
    """Return the line that closes a code fence left open at the end, or nothing: the
    Sources section must not land in it."""
    last = tokens[-1] if tokens else None
    if last is None or last.type != "fence" or not last.map:
        return ""
    start, end = last.map
    closing = lines[end - 1].strip(" \t")
    fence = last.markup
    closed = end - start > 1 and len(closing) >= len(fence) and closing == fence[0] * len(closing)
    return "" if closed else "\n" + fence


def _settle_paragraph(text: str, settle) -> str:
    pieces = []
    start = 0
    for span_start, span_end in code_spans(text):
        pieces.append(CITATION_LIKE.sub(settle, text[start:span_start]))
        pieces.append(text[span_start:span_end])
        start = span_end
    pieces.append(CITATION_LIKE.sub(settle, text[start:]))
    return "".join(pieces)


def code_spans(text: str) -> list[tuple[int, int]]:
    """Return where the code spans are: from a run of backticks to the next run of the same
    length. In one pass over the runs, so that thousands of backticks stay quick."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(text)]
    by_length: dict[int, list[int]] = {}
    for index, (start, end) in enumerate(runs):
        by_length.setdefault(end - start, []).append(index)
    spans = []
    index = 0
    while index < len(runs):
        start, end = runs[index]
        same = by_length[end - start]
        after = bisect.bisect_right(same, index)
        if after == len(same):
            index += 1
            continue
        spans.append((start, runs[same[after]][1]))
        index = same[after] + 1
    return spans


def sources_lines(tokens: list[Token], line_count: int) -> set[int]:
    """Return the lines of the `## Sources` sections the report has."""
    lines: set[int] = set()
    h2 = [i for i, t in enumerate(tokens) if t.type == "heading_open" and t.tag == "h2"]
    for position, i in enumerate(h2):
        if _heading_text(tokens, i) != _SOURCES_HEADING or not tokens[i].map:
            continue
        end = line_count
        if position + 1 < len(h2) and tokens[h2[position + 1]].map:
            end = tokens[h2[position + 1]].map[0]
        lines.update(range(tokens[i].map[0], end))
    return lines


def _sources_section(cited: Sequence) -> str:
    if not cited:
        return "## Sources\n\nThe report cites no passage.\n"
    rows = [f"- S{p.number} — {_escape(p.document)}, {_escape(_place(p))}" for p in cited]
    return "## Sources\n\n" + "\n".join(rows) + "\n"


def _place(passage) -> str:
    if passage.section:
        return " ".join(passage.section.split())
    return f"page {passage.page}" if passage.page else "its beginning"


def _escape(text: str) -> str:
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(text.split()))


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
    # The Sources list is Reportline's own (settle_citations), whoever wrote the heading.
    others = [i for i, name in sections if name not in ("summary", _SOURCES_HEADING)]
    if not others:
        problems.append("The report has no level-2 section besides the Summary.")
    elif not any(_section_has_words(tokens, i) for i in others):
        problems.append(
            "No level-2 section besides the Summary has words in it, only numbers, "
            "symbols or citations."
        )
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


def _section_has_words(tokens: list[Token], index: int) -> bool:
    """Return whether the level-2 section whose heading is at `index` (its subsections
    included) holds a letter outside its citations."""
    for token in tokens[index + 3 :]:
        if token.type == "heading_open" and token.tag in ("h1", "h2"):
            return False
        if any(char.isalpha() for char in CITATION_LIKE.sub("", token.content)):
            return True
    return False


def _section_has_text(tokens: list[Token], index: int) -> bool:
    # tokens[index + 1] is the heading's inline content, tokens[index + 2] its close.
    for token in tokens[index + 3 :]:
        if token.type == "heading_open":
            return False
        if token.content.strip():
            return True
    return False
