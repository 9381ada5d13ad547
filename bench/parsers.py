"""Compare document readers on the corpus: quality and speed per format, per library.

    python -m bench.parsers [--runs 3]
    python -m bench.parsers --largest

Each reader reads each corpus document (tests/fixtures/corpus) in a child process of its
own: the median time of --runs reads, and the growth of the child's peak resident memory
over a bare interpreter (the reader's imports included). Quality is checked against the
facts a reader would check (tests/fixtures/corpus/facts.json): is the first line the title,
which top-level sections stand on a line of their own, and how many lines are junk
(contents or index lines with dot leaders, bare page numbers, Markdown or HTML syntax).
--largest instead reads a document of each type as big as an upload may be, through the
sandbox and its limits.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "corpus"
FACTS = json.loads((CORPUS / "facts.json").read_text())

_LEADER = re.compile(r"(?:\.\s?){4,}")
_PAGE_NUMBER = re.compile(r"\s*[-\u2013]?\s*\d{1,4}\s*[-\u2013]?\s*")
_MARKUP = re.compile(r"\]\(|!\[|<img|<p\b|<div|\]\[|^\s*\[!\[")
_HEADING_MARK = re.compile(r"^(?:#+\s*)?(?:\d+(?:\.\d+)*\.?\s+)?")


def _reportline(path: Path) -> str:
    """The product's reader of the type, in this process: the work its parse sandbox's child
    does, without the child's start."""
    from reports.parsers import docx, html, markdown, pdf, text

    data = path.read_bytes()
    return {
        ".pdf": lambda data: pdf.document_text(data)["text"],  # with the pages read by OCR
        ".docx": docx.document_text,
        ".html": html.document_text,
        ".md": markdown.document_text,
        ".txt": text.TextParser().extract,  # read in the worker itself: no sandbox
    }[path.suffix](data)


def _pypdf(path: Path) -> str:
    from pypdf import PdfReader

    return "\n\n".join(page.extract_text() or "" for page in PdfReader(path).pages)


def _pypdfium2(path: Path) -> str:
    import pypdfium2

    document = pypdfium2.PdfDocument(path)
    pages = [document[i].get_textpage().get_text_range() for i in range(len(document))]
    return "\n\n".join(pages).replace("\r\n", "\n")


def _pdfminer(path: Path) -> str:
    from pdfminer.high_level import extract_text

    return extract_text(path)


def _python_docx(path: Path) -> str:
    import docx

    return "\n\n".join(p.text for p in docx.Document(path).paragraphs)


def _mammoth(path: Path) -> str:
    import mammoth

    with path.open("rb") as file:
        return mammoth.convert_to_markdown(file).value


def _lxml(path: Path) -> str:
    import lxml.html

    return lxml.html.fromstring(path.read_bytes()).text_content()


def _source(path: Path) -> str:
    return path.read_text()


READERS = {
    "reportline": ({".pdf", ".docx", ".html", ".md", ".txt"}, _reportline),
    "pypdf": ({".pdf"}, _pypdf),
    "pypdfium2 (text)": ({".pdf"}, _pypdfium2),
    "pdfminer.six": ({".pdf"}, _pdfminer),
    "python-docx (paragraphs)": ({".docx"}, _python_docx),
    "mammoth (Markdown)": ({".docx"}, _mammoth),
    "lxml (text_content)": ({".html"}, _lxml),
    "the source as it is": ({".md", ".txt"}, _source),
}


def _read_in_child(reader: str, path: Path, runs: int) -> dict:
    """Run in a child: time `runs` reads, measure peak memory beyond the imports."""
    _formats, read = READERS[reader]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    read(path)  # imports and caches count in the memory, not in the time
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        text = read(path)
        times.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": statistics.median(times), "memory_mb": (after - before) / 1024, "text": text}


def _quality(text: str, facts: dict) -> dict:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    bare = [_HEADING_MARK.sub("", line).strip().lower() for line in lines]
    title = facts["title"].lower()
    junk = sum(
        1
        for line in lines
        if _LEADER.search(line) or _PAGE_NUMBER.fullmatch(line) or _MARKUP.search(line)
    )
    found = sum(1 for section in facts["sections"] if section.lower() in bare)
    return {
        "title": bool(bare) and bare[0] == title,
        "sections": found / len(facts["sections"]),
        "junk": junk,
    }


def compare(runs: int) -> list[dict]:
    rows = []
    for name, facts in sorted(FACTS.items()):
        path = CORPUS / name
        for reader, (formats, _read) in READERS.items():
            if path.suffix not in formats:
                continue
            child = subprocess.run(
                [sys.executable, "-m", "bench.parsers", "--child", reader, str(path), str(runs)],
                capture_output=True,
                text=True,
                check=True,
            )
            result = json.loads(child.stdout)
            rows.append(
                {
                    "format": path.suffix,
                    "document": name,
                    "reader": reader,
                    "seconds": result["seconds"],
                    "memory_mb": result["memory_mb"],
                    **_quality(result["text"], facts),
                }
            )
    return rows


def summary_table(rows: list[dict]) -> str:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        groups[row["format"], row["reader"]].append(row)
    lines = [
        "| Format | Reader | Titles found | Sections found | Junk lines | Time (total) "
        "| Peak memory |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (fmt, reader), group in sorted(groups.items()):
        titles = sum(row["title"] for row in group)
        sections = statistics.mean(row["sections"] for row in group)
        lines.append(
            f"| {fmt} | {reader} | {titles}/{len(group)} | {sections:.0%} "
            f"| {sum(row['junk'] for row in group)} "
            f"| {sum(row['seconds'] for row in group) * 1000:.0f} ms "
            f"| {max(row['memory_mb'] for row in group):.0f} MB |"
        )
    return "\n".join(lines)


def _largest_documents(limit_bytes: int) -> Iterator[tuple[str, bytes]]:
    """Yield a document of each type just under `limit_bytes`, made of corpus text."""
    for suffix, name in ((".html", "bzip2-manual.html"), (".md", "markdown-it-py-README.md"),
                         (".txt", "sqlite-flextypegood.txt")):  # fmt: skip
        data = (CORPUS / name).read_bytes()
        yield suffix, data * (limit_bytes // len(data))
    pdf = _fill(_pdf_copies, limit_bytes)
    yield f".pdf ({_page_count(pdf)} pages)", pdf
    yield ".docx", _fill(_docx_copies(), limit_bytes)


def _fill(copies: Callable[[int], bytes], limit_bytes: int) -> bytes:
    """Return copies(count) for the largest count that stays within `limit_bytes`."""
    one, two = len(copies(1)), len(copies(2))
    count = max(1, 1 + (limit_bytes - one) // max(1, two - one))
    data = copies(count)
    while len(data) > limit_bytes and count > 1:
        count -= 1
        data = copies(count)
    return data


def _pdf_copies(count: int) -> bytes:
    """Return `count` copies of a text-only manual's pages in one PDF, fonts and all."""
    import pypdfium2

    source = pypdfium2.PdfDocument(CORPUS / "nettle-manual.pdf")
    document = pypdfium2.PdfDocument.new()
    for _ in range(count):
        document.import_pages(source)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _page_count(pdf: bytes) -> int:
    import pypdfium2

    return len(pypdfium2.PdfDocument(pdf))


def _docx_copies() -> Callable[[int], bytes]:
    """Return a builder of a .docx holding the corpus's prose `count` times over."""
    import docx

    from reports.parsers.html import html_to_text

    # Text as varied as a long report's: a passage recurs only far beyond the reach of the
    # zip compression, so the file holds as much text as a real one of its size.
    sources = [(CORPUS / "sqlite-flextypegood.txt").read_text()] + [
        html_to_text((CORPUS / name).read_text())
        for name in ("bzip2-manual.html", "sqlite-appfileformat.html", "sqlite-quirks.html")
    ]
    paragraphs = [p for text in sources for p in text.split("\n\n") if p.strip()]

    def copies(count: int) -> bytes:
        document = docx.Document()
        for paragraph in paragraphs:
            document.add_paragraph(paragraph)
        # python-docx looks the section's end up for every paragraph it adds: the copies
        # go straight into the XML, before the section properties.
        body = document.element.body
        originals = list(body)[:-1]
        end = body[-1]
        for _ in range(count - 1):
            for element in originals:
                end.addprevious(copy.deepcopy(element))
        buffer = io.BytesIO()
        document.save(buffer)
        return buffer.getvalue()

    return copies


def _django() -> None:
    """Set Django up with the test settings: the project's defaults (and REPORTS_* from the
    environment) without a secret key to provide. The product's readers run in its parse
    sandbox, whose limits are settings."""
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()


def largest() -> None:
    _django()
    from django.conf import settings

    from reports.parsers import parser_for, sandbox

    limits = sandbox.Limits.from_settings()
    limit_bytes = int(settings.REPORTS_MAX_FILE_MB * 1024 * 1024)
    print(
        f"Limits: {settings.REPORTS_MAX_FILE_MB:g} MB a file, {limits.cpu_s} s of CPU, "
        f"{limits.memory_mb} MB of memory, {limits.wall_s:g} s in all.\n"
    )
    print("| Type | Size | Read in | Text | Outcome |")
    print("| --- | ---: | ---: | ---: | --- |", flush=True)
    for label, data in _largest_documents(limit_bytes):
        suffix = label.split()[0]
        parser = parser_for(f"largest{suffix}")
        start = time.perf_counter()
        try:
            text = parser.extract(data)
            outcome = "read"
        except Exception as exc:  # the outcome is what is measured
            text, outcome = "", f"refused: {exc}"
        seconds = time.perf_counter() - start
        print(
            f"| {label} | {len(data) / 1024 / 1024:.1f} MB | {seconds:.1f} s "
            f"| {len(text) / 1e6:.1f} M chars | {outcome} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--largest", action="store_true")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _django()
        reader, path, runs = args.child
        print(json.dumps(_read_in_child(reader, Path(path), int(runs))))
        return
    if args.largest:
        largest()
        return
    rows = compare(args.runs)
    print(summary_table(rows))
    print()
    print("| Document | Reader | Title | Sections | Junk | Time | Memory |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(
            f"| {row['document']} | {row['reader']} | {'yes' if row['title'] else 'no'} "
            f"| {row['sections']:.0%} | {row['junk']} | {row['seconds'] * 1000:.0f} ms "
            f"| {row['memory_mb']:.0f} MB |"
        )


if __name__ == "__main__":
    main()
