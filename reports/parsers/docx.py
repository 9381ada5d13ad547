"""Word .docx: paragraphs and tables in document order, headings as Markdown headings,
tables as Markdown pipe tables.

The title (Title style, else the core properties) is the one level-1 heading; Heading N
paragraphs become level N + 1.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator
from xml.etree import ElementTree

import docx
from docx.table import Table, _Cell
from docx.text.paragraph import Paragraph

from reports.parsers import sandbox
from reports.parsers.base import InvalidContent, ParseError, Parser, UnsupportedContent
from reports.parsers.tables import markdown_table
from reports.parsers.text import EMPTY

ZIP_SIGNATURE = b"PK\x03\x04"
# Office's legacy binary format, also the container of a password-protected .docx.
OLE_SIGNATURE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
REQUIRED_ENTRIES = ("[Content_Types].xml", "word/document.xml")

MAX_ENTRIES = 1000
MAX_UNCOMPRESSED_BYTES = 100 * 1024 * 1024
MAX_COMPRESSION_RATIO = 100
# Entries smaller than this are exempt from the ratio limit: small, repetitive XML parts can
# legitimately compress very well, and MAX_UNCOMPRESSED_BYTES bounds what they can expand to.
RATIO_EXEMPT_BYTES = 1024 * 1024

NOT_DOCX = "The file is not a .docx document."
DAMAGED = "The .docx document could not be read; it may be damaged. Try saving it again."
NO_TEXT = "The .docx document contains no text."
ZIP_BOMB = "The .docx document looks like a zip bomb: {reason}."

_HEADING = re.compile(r"heading ([1-9])")
_DECLARATION = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
DECLARATION = (
    "The .docx document contains a DOCTYPE or ENTITY declaration, which Word never writes; "
    "it is refused as a possible entity-expansion attack."
)
ENCODING = (
    "The .docx document has an XML part in an encoding Word never writes; "
    "it is refused, as such a part could hide a DOCTYPE declaration."
)
# Word writes UTF-8, sometimes UTF-16; an XML parser also reads EBCDIC, UTF-7 and more,
# in which a declaration would not be seen by the scan.
_WORD_ENCODINGS = {b"utf-8", b"utf8", b"utf-16", b"utf-16le", b"utf-16be"}
_ENCODING = re.compile(rb"\s*<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._:-]+)", re.IGNORECASE)
_EBCDIC_XML = b"\x4c\x6f\xa7\x94"  # "<?xm" in EBCDIC
_SCAN_CHUNK = 64 * 1024
_SCAN_OVERLAP = 64  # longer than any match of _DECLARATION, whitespace aside


def check_archive(data: bytes) -> None:
    """Check the archive's central directory, without decompressing anything.

    Raise UnsupportedContent when `data` is not a .docx at all, InvalidContent when it is
    damaged or would expand beyond the limits.
    """
    if not data.strip():
        raise InvalidContent(EMPTY)
    if data.startswith(OLE_SIGNATURE):
        raise UnsupportedContent(
            "The file is an old-style .doc or a password-protected Word document; "
            "save it as an unprotected .docx and upload it again."
        )
    if not data.startswith(ZIP_SIGNATURE):
        raise UnsupportedContent(NOT_DOCX)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError, NotImplementedError):
        # NotImplementedError: an entry claims a zip version Python cannot read.
        raise InvalidContent(DAMAGED) from None
    names = {entry.filename for entry in entries}
    if not all(name in names for name in REQUIRED_ENTRIES):
        raise UnsupportedContent(NOT_DOCX)
    if len(entries) > MAX_ENTRIES:
        raise InvalidContent(ZIP_BOMB.format(reason=f"it holds more than {MAX_ENTRIES} files"))
    total = sum(entry.file_size for entry in entries)
    if total > MAX_UNCOMPRESSED_BYTES:
        limit = MAX_UNCOMPRESSED_BYTES // (1024 * 1024)
        raise InvalidContent(ZIP_BOMB.format(reason=f"it would expand to more than {limit} MB"))
    for entry in entries:
        if entry.file_size >= RATIO_EXEMPT_BYTES and (
            entry.file_size > entry.compress_size * MAX_COMPRESSION_RATIO
        ):
            raise InvalidContent(
                ZIP_BOMB.format(reason=f"a part is compressed more than {MAX_COMPRESSION_RATIO}:1")
            )
    try:
        _reject_declarations(data)
    except InvalidContent:
        raise
    except Exception:
        # A part that fails to decompress (bad CRC, unknown method, encrypted entry).
        raise InvalidContent(DAMAGED) from None


class DocxParser(Parser):
    extensions = (".docx",)
    media_type = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    version = "3"

    def check(self, data: bytes) -> None:
        check_archive(data)

    def extract(self, data: bytes) -> str:
        return sandbox.run(f"{__name__}.document_text", data, sandbox.Limits.from_settings())


def document_text(data: bytes) -> str:
    """Return the document's text; run in the sandbox's child process."""
    # The upload was checked at submit time, but this runs on stored bytes: check again
    # rather than trust that.
    try:
        check_archive(data)
    except (InvalidContent, UnsupportedContent) as exc:
        raise ParseError(str(exc)) from None
    try:
        document = docx.Document(io.BytesIO(data))
        styles: dict[str | None, str] = {}
        blocks = [_block_text(block, styles) for block in document.iter_inner_content()]
        title = " ".join((document.core_properties.title or "").split())
    except MemoryError:
        raise  # the sandbox answers it as a document too big to read
    except Exception:
        # zipfile, lxml and python-docx raise many kinds of exception on a damaged file;
        # every one means the same thing to the user.
        raise ParseError(DAMAGED) from None
    # The title is the Title-styled paragraph, else the one in the document's properties.
    if title and not any(block.startswith("# ") for block in blocks):
        blocks.insert(0, f"# {title}")
    text = "\n\n".join(block for block in blocks if block).replace("\x00", "")
    if not text.strip():
        raise ParseError(NO_TEXT)
    return text


def _reject_declarations(archive_bytes: bytes) -> None:
    # A DTD can define entities (billion laughs, external files); WordprocessingML never needs
    # one, so any declaration is a trick, refused before any XML parser sees the part.
    # Neither a part's name nor its declared type proves it is not XML: the content types
    # may call `word/main.dat` the main document, or declare `_rels/.rels` an image, while
    # python-docx reads every relationships part and `*.xml` part as XML by its path. So a
    # part is skipped only when the package declares it as something other than XML (an
    # image, say) and its path is not that of an XML part. The parts are read in chunks:
    # their total size was bounded by the checks above.
    with zipfile.ZipFile(io.BytesIO(archive_bytes)) as archive:
        types = archive.getinfo("[Content_Types].xml")
        if refusal := _refusal(archive.open(types)):
            raise InvalidContent(refusal)
        not_xml = _declared_not_xml(archive.read(types))
        for entry in archive.infolist():
            if entry.is_dir() or entry.filename == types.filename:
                continue
            if not_xml(entry.filename) and not _xml_by_path(entry.filename):
                continue
            if refusal := _refusal(archive.open(entry)):
                raise InvalidContent(refusal)


def _xml_by_path(name: str) -> bool:
    """Whether a part is XML by its path, whatever the package declares: a relationships
    part (in a `_rels` folder, or named `.rels`) or a part named `.xml`."""
    path = name.lower().replace("\\", "/")
    return path.endswith((".rels", ".xml")) or "_rels/" in path


def _declared_not_xml(content_types: bytes) -> Callable[[str], bool]:
    """Return a test of whether the package declares a part (by its name in the archive)
    as something other than XML: by an Override of its own, else by its extension's Default."""
    root = ElementTree.fromstring(content_types)  # no DTD: checked just before
    defaults: dict[str, bool] = {}
    overrides: dict[str, bool] = {}
    for element in root:
        kind = element.get("ContentType", "").split(";")[0].strip().lower()
        is_xml = kind.endswith(("/xml", "+xml"))
        if element.tag.endswith("}Default") and element.get("Extension"):
            defaults[element.get("Extension").lower()] = is_xml
        elif element.tag.endswith("}Override") and element.get("PartName"):
            overrides[element.get("PartName").lower()] = is_xml

    def not_xml(name: str) -> bool:
        part = "/" + name.lower()
        if part in overrides:
            return not overrides[part]
        _stem, dot, extension = part.rpartition("/")[2].rpartition(".")
        return bool(dot) and not defaults.get(extension, True)

    return not_xml


def _refusal(part) -> str | None:
    """Return why this XML part is refused (a declaration, or an encoding that could hide
    one from the scan), or None."""
    tail = b""
    first = True
    while chunk := part.read(_SCAN_CHUNK):
        # Dropping NUL bytes makes a UTF-16 or UTF-32 declaration searchable as ASCII.
        window = tail + chunk.replace(b"\x00", b"")
        if first:
            first = False
            head = window.removeprefix(b"\xef\xbb\xbf").removeprefix(b"\xfe\xff")
            head = head.removeprefix(b"\xff\xfe")
            encoding = _ENCODING.match(head)
            if head.startswith(_EBCDIC_XML) or (
                encoding is not None and encoding[1].lower() not in _WORD_ENCODINGS
            ):
                return ENCODING
        if _DECLARATION.search(window):
            return DECLARATION
        tail = window[-_SCAN_OVERLAP:]
    return None


def _block_text(block: Paragraph | Table, styles: dict[str | None, str]) -> str:
    if isinstance(block, Table):
        return _table_text(block)
    return _paragraph_text(block, styles)


def _paragraph_text(paragraph: Paragraph, styles: dict[str | None, str]) -> str:
    text = paragraph.text.strip()
    if not text:
        return ""
    style = _style_name(paragraph, styles)
    if style == "title":
        level = 1
    elif match := _HEADING.fullmatch(style):
        # One level below the title: Heading 1 starts a top-level section.
        level = min(int(match[1]) + 1, 6)
    elif style.startswith(("list bullet", "list paragraph")):
        return f"- {text}"
    elif style.startswith("list number"):
        return f"1. {text}"
    else:
        return text
    return "#" * level + " " + " ".join(text.split())


def _style_name(paragraph: Paragraph, styles: dict[str | None, str]) -> str:
    """Return the paragraph's style name, lower-cased; `styles` keeps them by style id.

    python-docx finds a style by going through all of the document's styles: once per
    style id, not once per paragraph (that made a long document's reading slow).
    """
    style_id = paragraph._p.style  # None for the default paragraph style
    if style_id not in styles:
        style = paragraph.style
        styles[style_id] = (style.name or "").lower() if style is not None else ""
    return styles[style_id]


def _table_text(table: Table) -> str:
    # A merged cell is reported once per grid cell it covers: its text goes in the first,
    # and the others stay empty, so that every row keeps the table's columns.
    seen: set[object] = set()
    rows = []
    for row in table.rows:
        cells = []
        for cell in row.cells:
            fresh = cell._tc not in seen
            seen.add(cell._tc)
            cells.append(" ".join(_cell_texts(cell.iter_inner_content())) if fresh else "")
        rows.append(cells)
    return markdown_table(rows)


def _cell_texts(blocks: Iterable[Paragraph | Table]) -> Iterator[str]:
    for block in blocks:
        if isinstance(block, Table):
            # A table inside a cell is flattened into the cell's text.
            for row in block.rows:
                for cell in _unique(row.cells):
                    yield from _cell_texts(cell.iter_inner_content())
        elif text := " ".join(block.text.split()):
            yield text


def _unique(cells: list[_Cell]) -> list[_Cell]:
    # A merged cell is reported once per grid column it spans; keep its first appearance.
    seen: set[object] = set()
    unique = []
    for cell in cells:
        if cell._tc not in seen:
            seen.add(cell._tc)
            unique.append(cell)
    return unique
