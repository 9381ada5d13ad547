"""Hostile documents, built in code: each one attacks a parser or a limit."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
import zlib
from html.parser import HTMLParser

from tests.parsers import samples


def pdf_that_explodes(operators: int = 2_000_000) -> bytes:
    """Return a PDF of some 60 KB whose one page decompresses to millions of text operators.

    Reading its text costs minutes of CPU time and hundreds of MB: a flood, not a document.
    """
    content = b"BT /F1 12 Tf " + b"(ab) Tj 0 -1 Td " * operators + b" ET"
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    return samples.pdf_from_objects(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
            samples._stream(zlib.compress(content, 9), b"/Filter /FlateDecode "),
            font,
        ]
    )


def pdf_with_a_huge_page_tree(pages: int = 100_000) -> bytes:
    """Return a PDF whose page tree lists one page 100,000 times: half a minute of work."""
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    return samples.pdf_from_objects(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join([b"3 0 R"] * pages), pages),
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
            samples._stream(b"BT /F1 12 Tf (page) Tj ET"),
            font,
        ]
    )


def docx_of(document_xml: bytes) -> bytes:
    """Return a minimal .docx whose document part is `document_xml`."""
    return samples.zip_of(
        {
            "[Content_Types].xml": (
                b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/'
                b'package/2006/content-types"/>'
            ),
            "word/document.xml": document_xml,
        }
    )


def billion_laughs_docx() -> bytes:
    """Return a .docx whose document part nests entities ten deep: 10^9 "lol"s if expanded."""
    entities = ['<!ENTITY lol0 "lol">'] + [
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
    ]
    xml = (
        '<?xml version="1.0"?><!DOCTYPE w:document [' + "".join(entities) + "]>"
        '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
        "<w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>"
    )
    return docx_of(xml.encode())


def zip_bomb_docx(megabytes: int = 50) -> bytes:
    """Return a .docx of some 50 KB holding a part that inflates to `megabytes` of zeros."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("[Content_Types].xml", b"<Types/>")
        archive.writestr("word/document.xml", b"<w:document/>")
        archive.writestr("word/media/image1.bin", bytes(megabytes * 1024 * 1024))
    return out.getvalue()


def docx_that_stalls(paragraphs: int = 100_000) -> bytes:
    """Return a .docx of some 300 KB that python-docx takes minutes to walk.

    Nothing in it is malformed or over a limit: its 100,000 short paragraphs are simply
    more than python-docx reads in reasonable time (its walk slows with the document).
    """

    def build(document) -> None:
        document.add_paragraph("Start.")

    source = samples.docx_bytes(build)
    with zipfile.ZipFile(io.BytesIO(source)) as archive:
        xml = archive.read("word/document.xml").decode()
    head, rest = xml.split("<w:body>", 1)
    body = "".join(
        f"<w:p><w:r><w:t>Paragraph {i} of a long document.</w:t></w:r></w:p>"
        for i in range(paragraphs)
    )
    return samples.rezip(
        source, replace={"word/document.xml": f"{head}<w:body>{body}{rest}".encode()}
    )


def own_pid(data: bytes) -> int:
    """A sandbox entry that says which process ran it."""
    return os.getpid()


def sleep_forever(data: bytes) -> list[str]:
    """A sandbox entry that never ends and uses no CPU: only the wall clock stops it."""
    time.sleep(3600)
    return []


def starts_a_program_and_waits(data: bytes) -> list[str]:
    """A sandbox entry that starts a program (as OCR starts Tesseract), says its pid, and
    waits for it."""
    from reports.parsers import sandbox

    program = subprocess.Popen(["sleep", "3600"])
    sandbox.tell(str(program.pid))
    program.wait()
    return []


def asks_for_all_the_time(data: bytes) -> list[str]:
    """A sandbox entry that asks for an hour more than its wall-clock limit, and sleeps."""
    from reports.parsers import sandbox

    sandbox.tell("a long read", more_wall_s=3600)
    time.sleep(3600)
    return []


def niceness(data: bytes) -> int:
    """A sandbox entry that answers how nice it runs."""
    return os.nice(0)


def write_to_stdout(data: bytes) -> list[str]:
    """A sandbox entry that writes to stdout besides its answer, as a chatty library would."""
    sys.stdout.write("Warning: odd xref table\n")
    return ["text"]


def allocate_without_end(data: bytes) -> list[str]:
    """A sandbox entry that allocates until something stops it."""
    hoard = []
    while True:
        hoard.append(bytearray(16 * 1024 * 1024))


SAFE_TAGS = {
    "a", "blockquote", "br", "code", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "img",
    "li", "ol", "p", "pre", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip


# data-citation: a citation link to the task's own source page (docs/api.md, "Citations").
SAFE_ATTRIBUTES = {"href", "src", "alt", "title", "rel", "start", "class", "data-citation"}


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.elements.append((tag, dict(attrs)))


def assert_inert(html: str) -> None:
    """Assert that `html`, parsed as a browser would, has no element or URL that runs or
    loads anything foreign: only the sanitiser's tags, no handlers, no styles."""
    parser = _Elements()
    parser.feed(html)
    for tag, attrs in parser.elements:
        assert tag in SAFE_TAGS, (tag, html)
        assert set(attrs) <= SAFE_ATTRIBUTES, (attrs, html)
        href = re.sub(r"[\x00-\x20]", "", attrs.get("href") or "").lower()
        assert not href.startswith(("javascript:", "vbscript:", "data:")), html
        if tag == "img":
            src = attrs.get("src") or ""
            assert src.startswith("/") and not src.startswith(("//", "/\\")), html


def nested_html(tags: int = 37_000) -> bytes:
    """Return the red team's page: `tags` unclosed tags inside <nav>, then as many stray end
    tags (259 KB). Its hidden-element stack grows to `tags` deep."""
    return ("<nav>" + "<i>" * tags + "</b>" * tags).encode()


def html_hiding_its_text(tags: int = 37_000) -> bytes:
    """Return a page whose only words sit in a script, past the part the upload check
    parses: only a whole parse can tell that a reader sees nothing."""
    return nested_html(tags) + b"<script>words a reader never sees</script></nav>"


def slow_html(paragraphs: int = 1_000_000) -> bytes:
    """Return a page of some 8 MB that takes seconds of CPU to read, however it is read."""
    return nested_html() + b"<p>x</p>" * paragraphs


def mixed_encoding_text(megabytes: int = 9) -> bytes:
    """Return UTF-8 text with a windows-1252 byte after every character: the mixed encoding at
    its densest, 1.8 million stray bytes in 9 MB."""
    unit = "é".encode() + b"a\xe9 "
    return unit * (megabytes * 1024 * 1024 // len(unit))


def pdf_with_nested_forms(depth: int = 28) -> bytes:
    """Return a PDF of a few KB whose page draws a form that draws the next one twice, `depth`
    deep: 2^depth pieces of text to lay out."""
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    first_form = 6
    forms = []
    for level in range(depth):
        if level + 1 < depth:
            resources = b"<< /XObject << /X %d 0 R >> >>" % (first_form + level + 1)
            content = b"/X Do /X Do"
        else:
            resources = b"<< /Font << /F1 5 0 R >> >>"
            content = b"BT /F1 12 Tf (form) Tj ET"
        forms.append(
            samples._stream(
                content,
                b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources %s " % resources,
            )
        )
    return samples.pdf_from_objects(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /XObject << /X %d 0 R >> >> /Contents 4 0 R >>" % first_form,
            samples._stream(b"/X Do"),
            font,
            *forms,
        ]
    )


def terminated_midway(data: bytes) -> list[str]:
    """A sandbox entry that gets the SIGTERM and Ctrl-C a whole process group would, then
    answers."""
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGINT)
    return ["text"]


def deeply_nested_markdown(levels: int = 10_000) -> dict[str, str]:
    """Return Markdown nested `levels` deep in each way it nests, each with words at the
    bottom: quotes, bullets, numbers, and quotes and bullets in turn."""
    return {
        "quotes": ">" * levels + " deepest words",
        "bullets": "- " * levels + "deepest words",
        "numbers": "1. " * levels + "deepest words",
        "quoted bullets": "> - " * (levels // 2) + "deepest words",
    }
