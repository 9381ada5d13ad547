"""The report as a standalone HTML page: the page's own rendering, an inline stylesheet, no script.

Citations link to their entries in the report's Sources section, within the file, since
the task's source pages are not there when the file is opened on its own; for that same
reason any other link to a path on the site is its words alone, and an image on the site
its alt text (the site's address is not known here, and the page's CSP and the PDF's
fetcher load nothing from outside the file). A block whose
first letter is of a right-to-left script (Arabic, Hebrew…) is marked `dir="rtl"`, as a
browser resolves `dir="auto"`, but written out, so that WeasyPrint, which reads `dir` but
does not resolve "auto", sets the PDF's paragraphs, lists and tables right to left too. The page's
template is read by an engine of its own, so that the sandbox's child, which has no
settings, can render it.
"""

from __future__ import annotations

import base64
import re
from html import unescape
from pathlib import Path

from django.template import Context, Engine

from reports.exports import language
from reports.exports.direction import first_strong
from reports.rendering import render_markdown

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
_engine = Engine(dirs=[str(TEMPLATES)])

_CITATION_HREF = re.compile(r'href="sources/(S\d+)/"')
_SOURCES_HEADING = "<h2>Sources</h2>"
_SOURCE_ENTRY = re.compile(r'<(li|p)><a href="#source-(S\d+)"')
_TITLE = re.compile(r"<h1>(.*?)</h1>", re.S)
_TAG = re.compile(r"<[^>]+>")
# A link or image the renderer kept on the site: anything but a fragment or an address.
_SITE_LINK = re.compile(r'<a href="(?![#]|[a-z][a-z0-9+.\-]*:)[^"]*"[^>]*>(.*?)</a>', re.S | re.I)
_IMAGE = re.compile(r"<img\b[^>]*>", re.I)
_ADDRESS_SRC = re.compile(r' src="[a-z][a-z0-9+.\-]*:', re.I)
_ALT = re.compile(r' alt="([^"]*)"')
# What `dir` is resolved for: the blocks a direction applies to, as dir="auto" would be set.
_BLOCKS = frozenset(
    {"p", "li", "ul", "ol", "blockquote", "table", "th", "td", "h1", "h2", "h3", "h4", "h5", "h6"}
)
_TAG_OR_TEXT = re.compile(r"<(/?)([a-z0-9]+)[^>]*>|[^<]+")


def standalone(markdown: str) -> str:
    """Return the report as a whole HTML page that needs nothing else to be read or printed."""
    body = _CITATION_HREF.sub(r'href="#source-\1"', render_markdown(markdown))
    body = _IMAGE.sub(_alt_of_site_image, _SITE_LINK.sub(r"\1", body))
    text, heading, sources = body.rpartition(_SOURCES_HEADING)
    if heading:
        sources = _SOURCE_ENTRY.sub(r'<\1 id="source-\2"><a href="#source-\2"', sources)
        body = text + heading + sources
    title = _TITLE.search(body)
    lang, body = languages(directed(body))
    context = {
        "title": unescape(_TAG.sub("", title.group(1))) if title else "Report",
        "lang": lang,
        "body": body,
    }
    return _engine.get_template("reports/export.html").render(Context(context))


def _alt_of_site_image(image: re.Match) -> str:
    if _ADDRESS_SRC.search(image[0]):
        return image[0]
    alt = _ALT.search(image[0])
    return alt[1] if alt else ""


def directed(body: str) -> str:
    """Return rendered report HTML with `dir` on each block whose direction, found from its
    first strongly directed letter (as for `dir="auto"`, reports.exports.direction), differs
    from the one it would inherit: "rtl" on an Arabic or Hebrew paragraph, "ltr" back on an
    English list inside it. A block with no such letter (a number) keeps its parent's."""
    pieces: list[str] = []
    # The open blocks, outermost first: [tag, index of its start tag in pieces, direction].
    open_blocks: list[list] = []
    undecided = 0
    for match in _TAG_OR_TEXT.finditer(body):
        pieces.append(match.group())
        closing, tag = match.group(1), match.group(2)
        if tag is None:
            if undecided:
                direction = first_strong(unescape(match.group()))
                if direction:
                    inherited = "ltr"
                    for block in open_blocks:
                        if block[2] is None:
                            block[2] = direction
                            if direction != inherited:
                                start = pieces[block[1]]
                                pieces[block[1]] = f'{start[:-1]} dir="{direction}">'
                        inherited = block[2]
                    undecided = 0
        elif tag in _BLOCKS:
            if not closing:
                open_blocks.append([tag, len(pieces) - 1, None])
                undecided += 1
            else:
                while open_blocks:
                    block = open_blocks.pop()
                    undecided -= block[2] is None
                    if block[0] == tag:
                        break
    return "".join(pieces)


def languages(body: str) -> tuple[str, str]:
    """Return the language of rendered report HTML, and the HTML with `lang` on each block
    whose own text (not its inner blocks') is in another language than the block holding it
    (reports.exports.language): so each letter is drawn in its language's shapes."""
    if not language.may_hold_cjk(body):  # most reports: nothing to read letter by letter
        return language.DEFAULT, body
    pieces: list[str] = []
    # Each block: [index of its start tag in pieces, its parent's index in blocks, its text].
    blocks: list[list] = [[-1, -1, []]]  # the page itself, whose text is all of it
    open_blocks = [0]  # indexes in blocks, outermost first
    open_tags = ["body"]
    for match in _TAG_OR_TEXT.finditer(body):
        pieces.append(match.group())
        closing, tag = match.group(1), match.group(2)
        if tag is None:
            text = unescape(match.group())
            blocks[0][2].append(text)
            if len(open_blocks) > 1:
                blocks[open_blocks[-1]][2].append(text)
        elif tag in _BLOCKS and not closing:
            blocks.append([len(pieces) - 1, open_blocks[-1], []])
            open_blocks.append(len(blocks) - 1)
            open_tags.append(tag)
        elif tag in _BLOCKS and tag in open_tags[1:]:
            while open_tags.pop() != tag:
                open_blocks.pop()
            open_blocks.pop()
    # Parents come before their blocks: each block's language is known before its own.
    langs: list[str] = []
    for start, parent, text in blocks:
        inherited = langs[parent] if parent >= 0 else language.DEFAULT
        own = language.language_of("".join(text), inherited) or inherited
        langs.append(own)
        if start >= 0 and own != inherited:
            pieces[start] = f'{pieces[start][:-1]} lang="{own}">'
    return langs[0], "".join(pieces)


def in_child(markdown: bytes) -> str:
    """Return the page of the Markdown bytes, as base64 text (the sandbox's entry)."""
    return base64.b64encode(standalone(markdown.decode("utf-8")).encode("utf-8")).decode("ascii")
