"""The report as a Word document, built from the Markdown's own token stream.

Headings get Word's heading styles (Heading 1…6), lists its list styles (List Bullet,
List Number, deeper levels as "List Bullet 2"…), tables real tables, and the entries of
the Sources section a numbered list. Each numbered list starts at its own
first number (python-docx's list styles would otherwise number every list as one).
A paragraph whose first letter is Arabic or Hebrew is a right-to-left paragraph (`w:bidi`:
right-aligned, its number or bullet on the right, its words in their order), as the HTML
page's `dir` (reports.exports.direction); a table whose first cell is, is laid out right
to left (`w:bidiVisual`). python-docx has no property for either: they are set in the XML.
A link to a web or mail address is a Word hyperlink to it, blue and underlined; any other
link (a path on the site, which a file opened elsewhere cannot follow) is its text alone.
Each cited id (`[S12]`) links, inside the document, to its entry of the Sources section,
which is a bookmark (`source_S12`), as the HTML page's citations link to theirs.

`in_child` runs in the sandbox's child process (reports.exports), which hands it the
Markdown and reads back the document as base64 text.
"""

from __future__ import annotations

import base64
import io
import re

from docx import Document
from docx.document import Document as WordDocument
from docx.opc.constants import RELATIONSHIP_TYPE
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from docx.shared import Pt, RGBColor
from docx.text.paragraph import Paragraph
from markdown_it.token import Token

from reports.exports import language
from reports.exports.direction import first_strong
from reports.parsers import markdown_depth
from reports.rendering import ALLOWED_SCHEMES, CITATION, PASSAGE_IDS, is_safe_link

_md = markdown_depth.parser("commonmark", {"html": False}).enable("table")
MONOSPACE = "Courier New"
LINK_COLOUR = RGBColor(0x0B, 0x57, 0xD0)  # the HTML page's
_ADDRESS = re.compile(r"^([a-z][a-z0-9+.\-]*):", re.I)
DEEPEST_LIST_STYLE = 3  # Word's template has List Bullet/Number, … 2 and … 3
# What may follow w:bidi in a paragraph's properties, and w:bidiVisual in a table's (the
# schema's order, which Word holds to).
_AFTER_BIDI = (
    "w:adjustRightInd", "w:snapToGrid", "w:spacing", "w:ind", "w:contextualSpacing",
    "w:mirrorIndents", "w:suppressOverlap", "w:jc", "w:textDirection", "w:textAlignment",
    "w:textboxTightWrap", "w:outlineLvl", "w:divId", "w:cnfStyle", "w:rPr", "w:sectPr",
    "w:pPrChange",
)  # fmt: skip
_AFTER_BIDI_VISUAL = (
    "w:tblStyleRowBandSize", "w:tblStyleColBandSize", "w:tblW", "w:jc", "w:tblCellSpacing",
    "w:tblInd", "w:tblBorders", "w:shd", "w:tblLayout", "w:tblCellMar", "w:tblLook",
    "w:tblCaption", "w:tblDescription", "w:tblPrChange",
)  # fmt: skip
_AFTER_LANG = ("w:eastAsianLayout", "w:specVanish", "w:oMath")  # w:lang's, in a run's


# An entry of the Sources section, as reports.validation writes it: "S12 — file, place".
_SOURCE_ENTRY = re.compile(r"^(S[1-9]\d*) \u2014 ")


def render(markdown: str) -> bytes:
    """Return the .docx of a report's Markdown."""
    tokens = _md.parse(markdown)
    writer = _Writer(_sources_listed(tokens))
    writer.write(tokens)
    _set_directions(writer.document)
    _set_languages(writer.document)
    out = io.BytesIO()
    writer.document.save(out)
    return out.getvalue()


def _paragraphs(document: WordDocument) -> list[Paragraph]:
    """Return the document's paragraphs, those of its tables' cells after."""
    cells = (cell for table in document.tables for row in table.rows for cell in row.cells)
    return [*document.paragraphs, *(p for cell in cells for p in cell.paragraphs)]


def _set_directions(document: WordDocument) -> None:
    """Mark right to left each paragraph, and each table, whose text begins so."""
    for paragraph in _paragraphs(document):
        _set_direction(paragraph)
    for table in document.tables:
        if first_strong("".join(cell.text for cell in table.rows[0].cells)) == "rtl":
            table._tbl.tblPr.insert_element_before(OxmlElement("w:bidiVisual"), *_AFTER_BIDI_VISUAL)


def _set_languages(document: WordDocument) -> None:
    """Give the document the East Asian language of its text (reports.exports.language),
    and each paragraph in another one its own: Word draws Han characters in the shapes of
    the run's `w:eastAsia` language."""
    paragraphs = _paragraphs(document)
    whole = language.language_of("\n".join(p.text for p in paragraphs)) or language.DEFAULT
    defaults = document.styles.element.find(qn("w:docDefaults"))
    defaults.find(f"{qn('w:rPrDefault')}/{qn('w:rPr')}/{qn('w:lang')}").set(
        qn("w:eastAsia"), language.WORD[whole]
    )
    for paragraph in paragraphs:
        own = language.language_of(paragraph.text, whole)
        if own in language.CJK and own != whole:
            for run in paragraph._p.iter(qn("w:r")):
                lang = OxmlElement("w:lang")
                lang.set(qn("w:eastAsia"), language.WORD[own])
                run.get_or_add_rPr().insert_element_before(lang, *_AFTER_LANG)


def _set_direction(paragraph: Paragraph) -> None:
    if first_strong(paragraph.text) == "rtl":
        pPr = paragraph._p.get_or_add_pPr()
        pPr.insert_element_before(OxmlElement("w:bidi"), *_AFTER_BIDI)


def _sources_listed(tokens: list[Token]) -> set[str]:
    """Return the passage ids the Sources section lists: the citations that link to it."""
    listed: set[str] = set()
    in_sources = False
    for index, token in enumerate(tokens):
        if token.type == "heading_open" and int(token.tag[1:]) <= 2:
            in_sources = (
                token.tag == "h2" and tokens[index + 1].content.strip().casefold() == "sources"
            )
        elif (
            in_sources and token.type == "inline" and (entry := _SOURCE_ENTRY.match(token.content))
        ):
            listed.add(entry.group(1))
    return listed


def _anchor(passage_id: str) -> str:
    """Return the bookmark of a passage's Sources entry (Word's names take no hyphen)."""
    return f"source_{passage_id}"


def in_child(markdown: bytes) -> str:
    """Return the .docx of the Markdown bytes, as base64 text (the sandbox's entry)."""
    return base64.b64encode(render(markdown.decode("utf-8"))).decode("ascii")


class _Writer:
    def __init__(self, sources: set[str]) -> None:
        self.document: WordDocument = Document()
        self.sources = sources  # the ids the Sources section lists: citations link there
        self.bookmarks = 0
        self.lists: list[dict] = []  # open lists, outermost first: style and numbering
        self.quoted = 0
        self.in_sources = False
        self._style_ids: dict[str, str] = {}
        self.link = None  # the hyperlink element the inline text goes into, if any

    def write(self, tokens: list[Token]) -> None:
        index = 0
        while index < len(tokens):
            token = tokens[index]
            kind = token.type
            if kind == "heading_open":
                index = self._heading(tokens, index)
                continue
            if kind == "paragraph_open":
                self._paragraph(tokens[index + 1])
                index += 3
                continue
            if kind == "table_open":
                index = self._table(tokens, index)
                continue
            if kind in {"bullet_list_open", "ordered_list_open"}:
                # The Sources section's entries are numbered, however the Markdown lists them.
                ordered = kind == "ordered_list_open" or (self.in_sources and not self.lists)
                start = int(token.attrGet("start") or 1) if ordered else None
                self.lists.append({"ordered": ordered, "start": start, "numbering": None})
            elif kind in {"bullet_list_close", "ordered_list_close"}:
                self.lists.pop()
            elif kind == "blockquote_open":
                self.quoted += 1
            elif kind == "blockquote_close":
                self.quoted -= 1
            elif kind in {"fence", "code_block"}:
                paragraph = self._add_paragraph(self._style())
                self._run(paragraph, token.content.rstrip("\n"), code=True)
            index += 1

    def _heading(self, tokens: list[Token], index: int) -> int:
        level = int(tokens[index].tag[1:])
        inline = tokens[index + 1]
        self._inline(self._add_paragraph(f"Heading {level}"), inline)
        if level <= 2:
            self.in_sources = level == 2 and inline.content.strip().casefold() == "sources"
        return index + 3

    def _style(self) -> str | None:
        if self.lists:
            kind = "List Number" if self.lists[-1]["ordered"] else "List Bullet"
            depth = min(len(self.lists), DEEPEST_LIST_STYLE)
            return kind if depth == 1 else f"{kind} {depth}"
        return "Quote" if self.quoted else None

    def _paragraph(self, inline: Token) -> None:
        style = self._style()
        paragraph = self._add_paragraph(style)
        if self.lists and self.lists[-1]["ordered"]:
            current = self.lists[-1]
            if current["numbering"] is None:
                current["numbering"] = self._new_numbering(style, current["start"])
            self._number(paragraph, current["numbering"])
        entry = _SOURCE_ENTRY.match(inline.content) if self.in_sources and self.lists else None
        if entry and entry.group(1) in self.sources:
            self._bookmark(paragraph, _anchor(entry.group(1)))
        self._inline(paragraph, inline)

    def _bookmark(self, paragraph: Paragraph, name: str) -> None:
        """Mark the paragraph as the place `name` names, for links inside the document."""
        self.bookmarks += 1
        start = OxmlElement("w:bookmarkStart")
        start.set(qn("w:id"), str(self.bookmarks))
        start.set(qn("w:name"), name)
        end = OxmlElement("w:bookmarkEnd")
        end.set(qn("w:id"), str(self.bookmarks))
        paragraph._p.append(start)
        paragraph._p.append(end)

    def _add_paragraph(self, style: str | None) -> Paragraph:
        paragraph = self.document.add_paragraph()
        if style is not None:
            # By id: python-docx looks a style's name up among all the styles each time.
            if style not in self._style_ids:
                self._style_ids[style] = self.document.styles[style].style_id
            paragraph._p.style = self._style_ids[style]
        return paragraph

    def _new_numbering(self, style: str, start: int) -> int:
        """Return a numbering of `style`'s kind that starts again at `start`."""
        numbering = self.document.part.numbering_part.element
        style_numbering = self.document.styles[style].element.pPr.numPr.numId.val
        abstract = numbering.num_having_numId(style_numbering).abstractNumId.val
        num = numbering.add_num(abstract)
        num.add_lvlOverride(ilvl=0).add_startOverride(start)
        return num.numId

    @staticmethod
    def _number(paragraph: Paragraph, numbering: int) -> None:
        paragraph._p.get_or_add_pPr().get_or_add_numPr().get_or_add_numId().val = numbering

    def _table(self, tokens: list[Token], index: int) -> int:
        rows: list[list[tuple[Token, bool]]] = []
        while tokens[index].type != "table_close":
            token = tokens[index]
            if token.type == "tr_open":
                rows.append([])
            elif token.type in {"th_open", "td_open"}:
                rows[-1].append((tokens[index + 1], token.type == "th_open"))
            index += 1
        columns = max((len(row) for row in rows), default=0)
        if columns:
            table = self.document.add_table(rows=len(rows), cols=columns, style="Table Grid")
            for cells, row in zip(rows, table.rows, strict=True):
                for (inline, header), cell in zip(cells, row.cells, strict=False):
                    self._inline(cell.paragraphs[0], inline, bold=header)
        return index + 1

    def _inline(self, paragraph: Paragraph, inline: Token, *, bold: bool = False) -> None:
        strong, emphasis = int(bold), 0
        self.link = None
        for child in inline.children or []:
            kind = child.type
            if kind == "link_open":
                self.link = self._hyperlink(paragraph, str(child.attrGet("href") or ""))
            elif kind == "link_close":
                self.link = None
            elif kind == "strong_open":
                strong += 1
            elif kind == "strong_close":
                strong -= 1
            elif kind == "em_open":
                emphasis += 1
            elif kind == "em_close":
                emphasis -= 1
            elif kind == "text" and self.link is None and not self.in_sources:
                self._cited(paragraph, child.content, bold=strong > 0, italic=emphasis > 0)
            elif kind == "text":
                self._run(paragraph, child.content, bold=strong > 0, italic=emphasis > 0)
            elif kind == "code_inline":
                self._run(paragraph, child.content, code=True)
            elif kind == "softbreak":
                self._run(paragraph, " ")
            elif kind == "hardbreak":
                paragraph.add_run().add_break()
            elif kind == "image":
                self._run(paragraph, child.content, italic=True)

    def _cited(self, paragraph: Paragraph, text: str, **style) -> None:
        """Write text whose citations' ids link to their entries of the Sources section."""
        start = 0
        for citation in CITATION.finditer(text):
            for found in PASSAGE_IDS.finditer(citation.group(1)):
                if found.group() not in self.sources:
                    continue
                at = citation.start(1) + found.start()
                self._run(paragraph, text[start:at], **style)
                self.link = self._internal_link(paragraph, _anchor(found.group()))
                self._run(paragraph, found.group(), **style)
                self.link = None
                start = at + len(found.group())
        self._run(paragraph, text[start:], **style)

    def _internal_link(self, paragraph: Paragraph, anchor: str):
        """Return a hyperlink element to the bookmark `anchor`, at the paragraph's end."""
        hyperlink = OxmlElement("w:hyperlink")
        hyperlink.set(qn("w:anchor"), anchor)
        paragraph._p.append(hyperlink)
        return hyperlink

    def _hyperlink(self, paragraph: Paragraph, href: str):
        """Return a hyperlink element to `href` at the paragraph's end, or None when `href` is
        no web or mail address."""
        scheme = _ADDRESS.match(href)
        if not (scheme and scheme.group(1).lower() in ALLOWED_SCHEMES and is_safe_link(href)):
            return None
        hyperlink = OxmlElement("w:hyperlink")
        hyperlink.set(
            qn("r:id"),
            self.document.part.relate_to(href, RELATIONSHIP_TYPE.HYPERLINK, is_external=True),
        )
        paragraph._p.append(hyperlink)
        return hyperlink

    def _run(self, paragraph: Paragraph, text: str, *, bold=False, italic=False, code=False):
        if not text:
            return
        run = paragraph.add_run(text)
        if self.link is not None:
            self.link.append(run._r)
            run.font.color.rgb = LINK_COLOUR
            run.underline = True
        if bold:
            run.bold = True
        if italic:
            run.italic = True
        if code:
            run.font.name = MONOSPACE
            run.font.size = Pt(9.5)
