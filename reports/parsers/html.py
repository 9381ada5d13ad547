"""HTML: the text a reader would see, with headings kept as Markdown headings.

The title (the page's <title>, else its first h1) is the one level-1 heading; an hN becomes
level N + 1. Page furniture (navigation, menus, tables of contents, headers and footers) is
left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from reports.parsers import sandbox
from reports.parsers.base import InvalidContent, ParseError, Parser
from reports.parsers.tables import MAX_COLUMNS, markdown_table
from reports.parsers.text import EMPTY, decode_for_extract, decode_text

NO_VISIBLE_TEXT = "The HTML file has no visible text."

# Elements whose content a reader never sees as text.
_HIDDEN = frozenset({"script", "style", "template", "noscript", "head", "title"})
# What may appear inside <head>; any other element starts the body, as browsers do when the
# closing </head> tag is left out.
_HEAD_CONTENT = frozenset(
    {"base", "link", "meta", "noscript", "script", "style", "template", "title"}
)
# Elements followed by a blank line, and elements that merely start a new line.
_PARAGRAPHS = frozenset(
    {"p", "pre", "blockquote", "ul", "ol", "dl", "figure", "hr"}
    | {f"h{level}" for level in range(1, 7)}
)
_LINES = frozenset(
    {
        "address", "article", "aside", "body", "br", "caption", "dd", "details", "dialog",
        "div", "dt", "fieldset", "figcaption", "footer", "form", "header", "hgroup", "html",
        "li", "main", "nav", "section", "summary", "tbody", "tfoot", "thead", "tr",
    }
)  # fmt: skip
_CELLS = frozenset({"td", "th"})
# A rowspan beyond this is read as this; a row's cells past this grid column are not read
# (the table keeps MAX_COLUMNS of them): crafted spans cannot make every row pad at length.
_MAX_ROWSPAN = 1000
_MAX_GRID_COLUMNS = 2 * MAX_COLUMNS
# Elements that never have content, nor an end tag.
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
    | {"track", "wbr", "param"}
)
# Elements that frame a page rather than say something, by name or by class or id.
_FURNITURE = frozenset({"nav", "header", "footer", "aside", "menu"})
_FURNITURE_NAME = re.compile(
    r"(?:^|[-_\s])(?:nav|navbar|navigation|menu|mainmenu|submenu|searchmenu|toc|"
    r"breadcrumbs?|sidebar|footer|header|banner|tagline|popup|"
    # The "¶" a heading links itself with (Sphinx, MkDocs' permalinks).
    r"headerlink)(?:$|[-_\s])",
    re.IGNORECASE,
)
# The document itself, whatever its class says: mdBook writes <html class="sidebar-visible">.
_NEVER_FURNITURE = frozenset({"html", "body", "main", "article"})
# A site generator's <title>: the page's own title and the site's name ("Page - Site",
# "Page — Site documentation", "Site | Page").
_TITLE_PARTS = re.compile(r"\s+[-\u2013\u2014|\u00b7:]{1,2}\s+")
_WHITESPACE = re.compile(r"\s+")
_BARE_MARKER = re.compile(r"(#{1,6}|-)")
_BLANK_RUNS = re.compile(r"\n{3,}")
# Feed this many characters at a time when only the presence of visible text matters, and
# parse at most this many at submit time: some 5,000 tags, a few tens of milliseconds.
_CHECK_CHUNK = 4 * 1024
_CHECK_PARSE_LIMIT = 16 * 1024
# A character outside any tag: after a tag's end, before the next tag's start.
_TEXT_AFTER_TAG = re.compile(r">\s*[^<\s]")


@dataclass
class _Table:
    """The outermost open table: its rows, and where in the page's text its cell begins."""

    start: int  # the index in `parts` where the table's text begins
    rows: list[list[str]] = field(default_factory=list)
    cell: int | None = None  # the index in `parts` where the open cell's text begins
    colspan: int = 1
    rowspan: int = 1
    covered: dict[int, int] = field(default_factory=dict)  # column: rows a rowspan covers
    depth: int = 1  # tables open, this one and those nested in its cells


class _VisibleText(HTMLParser):
    def __init__(self, *, furniture: bool = True) -> None:
        """`furniture`: leave out what frames the page (menus, sidebars, footers)."""
        super().__init__(convert_charrefs=True)
        self.furniture = furniture
        self.parts: list[str] = []
        self.has_text = False
        # The open elements of hidden content, and how many of each: every look-up and
        # every close is constant time (amortised), however deep a page nests its tags.
        self._hidden: list[str] = []
        self._open: dict[str, int] = {}
        self._pre_depth = 0
        self._tail = ""  # the last two characters written, to place breaks and spaces
        self._after_marker = False  # a "- " or "# " was written and no text yet
        self._table: _Table | None = None
        self.title = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._open.get("head") and tag not in _HEAD_CONTENT:
            self._close_hidden("head")
        if self._hidden or tag in _HIDDEN or self._frames(tag, attrs):
            # Inside hidden content every element is stacked, so that its end tag cannot
            # be taken for the end of the hidden one.
            if tag not in _VOID:
                self._hidden.append(tag)
                self._open[tag] = self._open.get(tag, 0) + 1
            return
        if tag == "table" or (self._table is not None and tag in ("tr", *_CELLS)):
            self._table_tag(tag, attrs)
            return
        if tag in _PARAGRAPHS:
            self._break(2)
        elif tag in _LINES:
            self._break(1)
        if tag == "pre":
            self._pre_depth += 1
        elif tag == "li":
            self._write("- ", marker=True)
        elif len(tag) == 2 and tag[0] == "h" and tag[1] in "123456":
            self._write("#" * (int(tag[1]) + 1) + " ", marker=True)

    def handle_endtag(self, tag: str) -> None:
        if self._open.get(tag):
            self._close_hidden(tag)
            return
        if self._table is not None and tag in ("table", "tr", *_CELLS):
            self._table_end(tag)
            return
        if tag == "pre" and self._pre_depth:
            self._pre_depth -= 1
        # An empty list item or heading must not pull the next block onto its line.
        self._after_marker = False
        if tag in _PARAGRAPHS:
            self._break(2)
        elif tag in _LINES and tag != "br":
            self._break(1)

    def handle_data(self, data: str) -> None:
        if len(self._hidden) == 1 and self._hidden[0] == "head" and data.strip():
            # Text straight inside <head> starts the body, as in a browser.
            self._close_hidden("head")
        if self._hidden:
            if self._hidden[-1] == "title":
                self.title += data
            return
        if not self._pre_depth:
            data = _WHITESPACE.sub(" ", data)
            if self._at_line_start() or self._tail.endswith(" "):
                data = data.lstrip(" ")
        if data:
            self.has_text = self.has_text or not data.isspace()
            self._write(data)

    def text(self) -> str:
        while self._table is not None:  # a table the page never closed ends with it
            self._table.depth = 1
            self._table_end("table")
        lines = [line.rstrip() for line in "".join(self.parts).split("\n")]
        lines = [line for line in lines if not _BARE_MARKER.fullmatch(line)]
        if not any(lines):
            return ""  # a title alone is not visible text
        title = " ".join(self.title.split())
        first_h1 = next((i for i, line in enumerate(lines) if line.startswith("## ")), None)
        if first_h1 is not None and (
            not title or lines[first_h1][3:] in (title, *_site_parts(title))
        ):
            # The first h1 is the title, or repeats it (without the site's name): it is
            # the title, once.
            title = lines[first_h1][3:]
            del lines[first_h1]
        if title:
            # A banner repeating the title before the first section is said once.
            end = next((i for i, line in enumerate(lines) if line.startswith("#")), len(lines))
            lines = [line for i, line in enumerate(lines) if i >= end or line != title]
            lines[:0] = [f"# {title}", ""]
        return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()

    def _table_tag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Open a table, a row or a cell. A table nested in a cell is read into that
        cell's text, its cells apart by spaces."""
        table = self._table
        if table is None:
            self._break(2)
            self._table = _Table(start=len(self.parts))
            return
        if table.depth > 1 or tag == "table":
            table.depth += tag == "table"
            self._write(" ")
            return
        self._close_cell()
        if tag == "tr" or not table.rows:
            table.rows.append([])
        if tag in _CELLS:
            table.cell = len(self.parts)
            table.colspan = _span(attrs, "colspan", MAX_COLUMNS)
            table.rowspan = _span(attrs, "rowspan", _MAX_ROWSPAN)
            self._tail = ""  # the cell starts a line of its own

    def _table_end(self, tag: str) -> None:
        table = self._table
        if table.depth > 1:
            table.depth -= tag == "table"
            self._write(" ")
            return
        self._close_cell()
        if tag != "table":
            return
        # Text in a table but in no cell (a caption) is said before it, as a browser shows it.
        outside = " ".join("".join(self.parts[table.start :]).split())
        del self.parts[table.start :]
        self._table = None
        # The table is a paragraph of its own, also where it began a list item's line.
        self._tail, self._after_marker = "".join(self.parts[-2:])[-2:], False
        self._break(2)
        if outside:
            self._write(outside)
            self._break(2)
        if text := markdown_table(table.rows):
            self.has_text = True
            self._write(text)
        self._break(2)

    def _close_cell(self) -> None:
        """Take the open cell's text out of the page's text into its row."""
        table = self._table
        if table.cell is None:
            return
        text = "".join(self.parts[table.cell :])
        del self.parts[table.cell :]
        row = table.rows[-1]
        self._skip_covered(row)
        for _ in range(table.colspan):
            if len(row) >= _MAX_GRID_COLUMNS:
                break  # past what a table keeps, however a crafted page spans its cells
            if table.rowspan > 1:
                table.covered[len(row)] = table.rowspan - 1
            row.append(text)
            text = ""  # a cell that spans columns says its text once
        self._skip_covered(row)
        table.cell = None

    def _skip_covered(self, row: list[str]) -> None:
        """Leave empty the columns a cell of a row above still covers (its rowspan)."""
        covered = self._table.covered
        while len(row) < _MAX_GRID_COLUMNS and covered.get(len(row)):
            covered[len(row)] -= 1
            row.append("")

    def _frames(self, tag: str, attrs: list[tuple[str, str | None]]) -> bool:
        """Tell whether the element frames the page rather than says something."""
        if not self.furniture or tag in _NEVER_FURNITURE:
            return False
        return tag in _FURNITURE or _is_furniture(attrs)

    def _close_hidden(self, tag: str) -> None:
        """Close the innermost open `tag` of hidden content and what it holds."""
        # Each element is popped once after being pushed once: constant time per tag.
        while True:
            closed = self._hidden.pop()
            self._open[closed] -= 1
            if closed == tag:
                return

    def _at_line_start(self) -> bool:
        return not self._tail or self._tail.endswith("\n")

    def _break(self, newlines: int) -> None:
        # Nothing written yet, or a block inside a list item (<li><p>…): stay on this line.
        if not self._tail or self._after_marker:
            return
        present = len(self._tail) - len(self._tail.rstrip("\n"))
        if newlines > present:
            self._write("\n" * (newlines - present))

    def _write(self, text: str, *, marker: bool = False) -> None:
        self.parts.append(text)
        self._tail = (self._tail + text)[-2:]
        self._after_marker = marker


def _site_parts(title: str) -> tuple[str, str]:
    """Return the first and the last part of a title made of parts, or two empty strings."""
    parts = _TITLE_PARTS.split(title)
    return (parts[0], parts[-1]) if len(parts) > 1 else ("", "")


def _span(attrs: list[tuple[str, str | None]], name: str, limit: int) -> int:
    """Return a cell's colspan or rowspan, from 1 to `limit` (1 when unreadable)."""
    value = dict(attrs).get(name) or ""
    return min(int(value), limit) if value.strip().isdigit() and int(value) > 0 else 1


def _is_furniture(attrs: list[tuple[str, str | None]]) -> bool:
    return any(
        name in ("class", "id", "role") and value and _FURNITURE_NAME.search(value)
        for name, value in attrs
    )


def html_to_text(html: str) -> str:
    """Return the visible text of `html`: one block per line, headings as "#" lines.

    What frames the page (menus, sidebars, footers) is left out, unless that would leave
    nothing: a page whose every part looks like furniture is read whole.
    """
    for furniture in (True, False):
        parser = _VisibleText(furniture=furniture)
        parser.feed(html)
        parser.close()
        if text := parser.text():
            return text
    return ""


def has_visible_text(html: str) -> bool:
    """Tell whether `html` seems to have visible text, in bounded time.

    Only the first _CHECK_PARSE_LIMIT characters are parsed (stopping at the first visible
    character); beyond them, any character outside a tag counts. html_to_text, at parse
    time, gives the final answer.
    """
    # The stdlib parser needs about 10 µs a tag: a 10 MB page of bare tags takes seconds,
    # too long for an upload request.
    parser = _VisibleText(furniture=False)  # any text counts: the parse may fall back to it
    head = html[:_CHECK_PARSE_LIMIT]
    for start in range(0, len(head), _CHECK_CHUNK):
        parser.feed(head[start : start + _CHECK_CHUNK])
        if parser.has_text:
            return True
    if len(html) <= _CHECK_PARSE_LIMIT:
        parser.close()
        return parser.has_text
    # Resume after the last complete tag, so as not to start inside one. A regular
    # expression led by a literal runs at C speed: tens of milliseconds for 10 MB of tags.
    rest = html[html.rfind(">", 0, _CHECK_PARSE_LIMIT) + 1 :]
    before_any_tag = rest[: rest.find("<")] if "<" in rest else rest
    return bool(before_any_tag.strip()) or _TEXT_AFTER_TAG.search(rest) is not None


class HtmlParser(Parser):
    extensions = (".html",)
    media_type = "text/html"
    version = "6"

    def check(self, data: bytes) -> None:
        html = decode_text(data)
        if not html.strip():
            raise InvalidContent(EMPTY)
        if not has_visible_text(html):
            raise InvalidContent(NO_VISIBLE_TEXT)

    def extract(self, data: bytes) -> str:
        # A page's work grows with its tags, whatever the parser: it is read in the sandbox,
        # under its limits, like every other format but plain text.
        return sandbox.run(f"{__name__}.document_text", data, sandbox.Limits.from_settings())


def document_text(data: bytes) -> str:
    """Return the page's visible text; run in the sandbox's child process."""
    text = html_to_text(decode_for_extract(data))
    if not text:
        raise ParseError(NO_VISIBLE_TEXT)
    return text
