"""Markdown to safe HTML for the finished report (rendered once, server side).

Each citation of a passage ("[S12]", "[S3, S7]") becomes a link to its source page,
relative to the task page: `<a data-citation="S12" href="sources/S12/">S12</a>`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape, unescape
from urllib.parse import unquote

import nh3
from markdown_it.renderer import RendererHTML
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from reports.parsers import markdown_depth

LINK_REL = "nofollow noopener noreferrer"
ALLOWED_SCHEMES = frozenset({"http", "https", "mailto"})

_SCHEME = re.compile(r"^([a-z][a-z0-9+.\-]*):")
# Browsers drop these anywhere in a URL, so "java\tscript:" must be read as "javascript:".
_IGNORED_IN_URL = re.compile(r"[\x00-\x20\x7f]")

_TAGS = {
    "a", "blockquote", "br", "code", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "img",
    "li", "ol", "p", "pre", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
_ATTRIBUTES = {
    "a": {"href", "title", "data-citation"},
    "img": {"src", "alt", "title"},
    "ol": {"start"},
}
# Cell alignment as classes, not style attributes: the page's CSP refuses inline styles.
_ALIGN_CLASSES = {"align-left", "align-center", "align-right"}
_CLASSES = {"th": _ALIGN_CLASSES, "td": _ALIGN_CLASSES}


def _plain_url(url: str) -> str:
    # Links arrive percent-encoded; judge them decoded, the strictest reading.
    return _IGNORED_IN_URL.sub("", unquote(url))


def _scheme(url: str) -> str | None:
    match = _SCHEME.match(_plain_url(url).lower())
    return match.group(1) if match else None


def is_safe_link(url: str) -> bool:
    """Allow http, https, mailto and relative or fragment links; nothing else."""
    scheme = _scheme(url)
    return scheme is None or scheme in ALLOWED_SCHEMES


def is_own_path(url: str) -> bool:
    """Is this an absolute path on our host: `/…`, with no scheme and no `//host`?"""
    # Browsers read a backslash as a slash, so "/\evil.example" is a foreign host too.
    plain = _plain_url(url)
    return _scheme(url) is None and plain.startswith("/") and not re.match(r"^[/\\]{2}", plain)


def _render_link_open(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    tokens[idx].attrSet("rel", LINK_REL)
    return self.renderToken(tokens, idx, options, env)


def _render_image(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    src = str(token.attrGet("src") or "")
    if not is_own_path(src):
        # A foreign image would leak the reader's address to its host: show its alt text.
        return escape(alt)
    token.attrSet("alt", alt)
    return self.renderToken(tokens, idx, options, env)


# In a text, before escapes join it: "\\[S3\\]" is text, not a citation; nor is a link
# the renderer refused, "[S3](…)".
CITATION = re.compile(r"\[(S[1-9]\d*(?:[ \t]*,[ \t]*S[1-9]\d*)*)\](?!\()")
PASSAGE_IDS = re.compile(r"S[1-9]\d*")
# An entry of the Sources section: "S12 — file name, section".
_SOURCE_ENTRY = re.compile(r"^(S[1-9]\d*)(?= \u2014 )")


# How a rendered report names a passage it links to (`_citation_link`).
_LINKED_PASSAGE = re.compile(r'data-citation="S([1-9]\d*)"')


def linked_passages(report_html: str) -> set[int]:
    """Return the numbers of the passages a rendered report links to: its citations and
    the entries of its Sources section."""
    return {int(number) for number in _LINKED_PASSAGE.findall(report_html)}


def _citation_link(passage_id: str) -> list[Token]:
    link = Token("link_open", "a", 1, attrs={"href": f"sources/{passage_id}/"})
    link.attrSet("data-citation", passage_id)
    return [link, Token("text", "", 0, content=passage_id), Token("link_close", "a", -1)]


def _text(content: str) -> Token:
    return Token("text", "", 0, content=content)


def _linked(text: str, pattern: re.Pattern) -> list[Token]:
    """Split a text token at each match of `pattern`, its passage ids made links."""
    tokens: list[Token] = []
    start = 0
    for match in pattern.finditer(text):
        tokens.append(_text(text[start : match.start(1)]))
        ids = match.group(1)
        at = 0
        for found in PASSAGE_IDS.finditer(ids):
            tokens.append(_text(ids[at : found.start()]))
            tokens.extend(_citation_link(found.group()))
            at = found.end()
        start = match.end(1)
    tokens.append(_text(text[start:]))
    return [t for t in tokens if t.type != "text" or t.content]


def _link_citations(state: StateCore) -> None:
    """Link the citations in the report's text, and the ids of its Sources section."""
    in_sources = False
    for index, block in enumerate(state.tokens):
        if block.type == "heading_open" and block.tag == "h2":
            in_sources = state.tokens[index + 1].content.strip().casefold() == "sources"
        if block.type != "inline" or not block.children:
            continue
        children: list[Token] = []
        in_link = 0
        for position, token in enumerate(block.children):
            in_link += {"link_open": 1, "link_close": -1}.get(token.type, 0)
            if token.type != "text" or in_link:
                children.append(token)
                continue
            if in_sources and position == 0 and state.tokens[index - 1].type == "paragraph_open":
                children.extend(_linked(token.content, _SOURCE_ENTRY))
                continue
            children.extend(_linked(token.content, CITATION))
        block.children = children


_md = markdown_depth.parser("commonmark", {"html": False}).enable("table")
_md.validateLink = is_safe_link  # type: ignore[method-assign]
_md.core.ruler.before("text_join", "citations", _link_citations)
_md.add_render_rule("link_open", _render_link_open)
_md.add_render_rule("image", _render_image)


# A heading's tag in rendered, cleaned HTML: nh3 leaves headings no attribute.
_HEADING_TAG = re.compile(r"<(/?)h([1-5])>")


def under_page_title(report_html: str) -> str:
    """Return a rendered report with each heading a level down (h1 to h2 … h5 to h6), for a
    page whose own h1 names the documents: a page has one h1, and the report's title and
    sections sit under it."""
    return _HEADING_TAG.sub(lambda m: f"<{m[1]}h{int(m[2]) + 1}>", report_html)


_TITLE = re.compile(r"<h1>(.*?)</h1>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")


def report_title(report_html: str) -> str:
    """Return the text of a rendered report's title (its first h1), or "" without one."""
    found = _TITLE.search(report_html)
    return " ".join(unescape(_TAG.sub("", found[1])).split()) if found else ""


def render_markdown(text: str) -> str:
    """Render report Markdown to HTML that is safe to put in the page."""
    tokens = _md.parse(text)
    for token in tokens:
        align = token.attrs.pop("style", "") if token.type in {"th_open", "td_open"} else ""
        if isinstance(align, str) and align.startswith("text-align:"):
            token.attrSet("class", "align-" + align.removeprefix("text-align:").strip())
    html = _md.renderer.render(tokens, _md.options, {})
    # Second line of defence: whatever the renderer let through, only these tags survive.
    return nh3.clean(
        html,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes=set(ALLOWED_SCHEMES),
        link_rel=LINK_REL,
        allowed_classes=_CLASSES,
    )
