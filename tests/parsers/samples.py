"""Documents for the parser tests, built in code so that every byte is visible here."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Sequence

import docx
from docx.document import Document
from pypdf import PdfReader, PdfWriter

# A 1x1 PNG: the magic number, then IHDR, IDAT and IEND chunks.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


def pdf_from_objects(objects: list[bytes]) -> bytes:
    """Return a PDF of `objects` (numbered from 1; object 1 is the catalog), with a valid xref."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def _stream(content: bytes, extra: bytes = b"") -> bytes:
    return b"<< %s/Length %d >>\nstream\n%s\nendstream" % (extra, len(content), content)


def _pdf_literal(text: str) -> bytes:
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return b"(" + escaped.encode("latin-1") + b")"


def pdf_with_pages(contents: list[bytes], resources: bytes, extra: Sequence[bytes] = ()) -> bytes:
    """Return a PDF whose pages draw `contents`; `extra` objects are numbered from 3."""
    first_page = 3 + len(extra)
    kids = b" ".join(b"%d 0 R" % (first_page + 2 * i) for i in range(len(contents)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, len(contents)),
        *extra,
    ]
    for index, content in enumerate(contents):
        page = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources %s /Contents %d 0 R >>" % (resources, first_page + 2 * index + 1)
        )
        objects += [page, _stream(content)]
    return pdf_from_objects(objects)


def text_pdf(*pages: str) -> bytes:
    """Return a PDF with one page per argument, each line of it drawn in Helvetica."""
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
    contents = []
    for page in pages:
        lines = b" 0 -16 Td ".join(_pdf_literal(line) + b" Tj" for line in page.split("\n"))
        contents.append(b"BT /F1 12 Tf 72 720 Td " + lines + b" ET")
    return pdf_with_pages(contents, b"<< /Font << /F1 3 0 R >> >>", [font])


def columns_pdf(blocks: Sequence[str | Sequence[Sequence[str]]], column_pt: int = 110) -> bytes:
    """Return a one-page PDF in Helvetica: each block a line of text, or rows of cells set
    in columns `column_pt` apart (a table with no rules, as most reports print them)."""
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
    drawn, top = [], 720
    for block in blocks:
        for row in [[block]] if isinstance(block, str) else block:
            for column, cell in enumerate(row):
                x = 72 + column * column_pt
                drawn.append(b"BT /F1 10 Tf %d %d Td %s Tj ET" % (x, top, _pdf_literal(cell)))
            top -= 14
        top -= 10
    return pdf_with_pages([b"\n".join(drawn)], b"<< /Font << /F1 3 0 R >> >>", [font])


def image_pdf() -> bytes:
    """Return a one-page PDF that shows a 2x2 grey image and has no text at all."""
    image = _stream(
        b"\x00\xff\xff\x00",
        b"/Type /XObject /Subtype /Image /Width 2 /Height 2 "
        b"/ColorSpace /DeviceGray /BitsPerComponent 8 ",
    )
    content = b"q 200 0 0 200 100 500 cm /Im1 Do Q"
    return pdf_with_pages([content], b"<< /XObject << /Im1 3 0 R >> >>", [image])


def blank_pdf() -> bytes:
    return pdf_with_pages([b""], b"<< >>")


def encrypted_pdf(source: bytes, user_password: str, owner_password: str = "owner") -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(source)))
    writer.encrypt(user_password, owner_password, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_bytes(build: Callable[[Document], object]) -> bytes:
    """Return the .docx that `build(document)` writes into a new python-docx Document."""
    document = docx.Document()
    build(document)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def rezip(
    source: bytes, replace: dict[str, bytes] | None = None, add: dict[str, bytes] | None = None
) -> bytes:
    """Return `source` (a zip) with some entries' content replaced and some entries added."""
    replace = replace or {}
    out = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(source)) as original,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as copy,
    ):
        for entry in original.infolist():
            copy.writestr(entry.filename, replace.get(entry.filename, original.read(entry)))
        for name, content in (add or {}).items():
            copy.writestr(name, content)
    return out.getvalue()


def zip_of(entries: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    return out.getvalue()


def _docx_article(document) -> None:
    document.add_heading("Tidal energy in small harbours", 1)
    document.add_paragraph(
        "Tidal energy is a predictable source of power. Small harbours see two tides a day."
    )
    document.add_heading("Findings", 2)
    document.add_paragraph(
        "Turbines in narrow harbour entrances produced steady power for eight hours a day."
    )


DOCX = docx_bytes(_docx_article)


def blank_scan_pdf(pages: int = 1) -> bytes:
    """Return a PDF of `pages` pages that each show a 2x2 grey image over the whole page (a
    scan, with nothing to read) and have no text at all."""
    image = _stream(
        b"\x00\xff\xff\x00",
        b"/Type /XObject /Subtype /Image /Width 2 /Height 2 "
        b"/ColorSpace /DeviceGray /BitsPerComponent 8 ",
    )
    content = b"q 612 0 0 792 0 0 cm /Im1 Do Q"
    return pdf_with_pages([content] * pages, b"<< /XObject << /Im1 3 0 R >> >>", [image])


def scanned_pdf(*pages: str) -> bytes:
    """Return a PDF with one scanned page per argument: an image of its lines, no text layer
    (an empty string gives a blank scan)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=40)
    images = []
    for page in pages:
        image = Image.new("L", (1275, 1650), 255)  # a Letter page at 150 dpi
        ImageDraw.Draw(image).multiline_text((120, 150), page, fill=0, font=font, spacing=18)
        images.append(image)
    out = io.BytesIO()
    images[0].save(out, "PDF", resolution=150, save_all=True, append_images=images[1:])
    return out.getvalue()


def joined_pdf(*pdfs: bytes) -> bytes:
    """Return one PDF with the pages of each of `pdfs`, in order."""
    writer = PdfWriter()
    for pdf in pdfs:
        writer.append(PdfReader(io.BytesIO(pdf)))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
