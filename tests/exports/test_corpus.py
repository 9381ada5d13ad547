"""The PDF and Word document of every corpus report open and hold its headings.

The reports are the simulated model's, of each corpus document (tests/fixtures/corpus),
and one written by hand with what those lack: nested and numbered lists, a table, code.
Converted in this process, as the sandbox's child would.
"""

from __future__ import annotations

import functools
import io
import json
import re
import time
from pathlib import Path

import docx
import pypdfium2
import pytest
from markdown_it import MarkdownIt

from reports.exports import docx as word
from reports.exports import html, pdf
from reports.parsers import parser_for
from reports.providers.base import SourceDocument
from reports.providers.report_writer import write_report
from tests.helpers import NESTED_REPORT, assert_every_tree
from tests.security import hostile

CORPUS = Path(__file__).parent.parent / "fixtures" / "corpus"
NAMES = sorted(json.loads((CORPUS / "facts.json").read_text()))
WRITTEN = """# Harbour survey

## Summary

Three harbours were surveyed [S1].

## Findings

1. Tides
   - spring tides reach **4 m**
   - neap tides `1.2 m`
2. Currents

| Harbour | Depth (m) |
|:--|--:|
| Northgate | 12 |
| Southwick | 9 |

```
depth = 12
```

## Sources

- S1 — survey.pdf, page 2
"""
_md = MarkdownIt("commonmark").enable("table")


@functools.cache
def reports() -> dict[str, str]:
    made = {"written by hand": WRITTEN}
    for name in NAMES:
        text = parser_for(name).extract((CORPUS / name).read_bytes())
        made[name] = write_report([SourceDocument(name, text)], "")
    return made


def headings(markdown: str) -> list[tuple[int, str]]:
    """Return each heading's level and text as a reader sees it."""
    tokens = _md.parse(markdown)
    return [
        (int(token.tag[1:]), "".join(c.content for c in tokens[i + 1].children or []))
        for i, token in enumerate(tokens)
        if token.type == "heading_open"
    ]


def words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize("name", ["written by hand", *NAMES])
def test_the_pdf_opens_and_holds_every_heading(name):
    report = reports()[name]
    document = pypdfium2.PdfDocument(pdf.render(html.standalone(report)))
    text = words(" ".join(page.get_textpage().get_text_range() for page in document))

    for _level, heading in headings(report):
        assert words(heading) in text
    assert f"Page 1 of {len(document)}" in text


@pytest.mark.parametrize("name", ["written by hand", *NAMES])
def test_the_word_document_opens_and_holds_every_heading_in_its_style(name):
    report = reports()[name]
    document = docx.Document(io.BytesIO(word.render(report)))
    styled = [(p.style.name, words(p.text)) for p in document.paragraphs]

    for level, heading in headings(report):
        assert (f"Heading {level}", words(heading)) in styled


def test_lists_tables_and_code_survive_in_the_word_document():
    document = docx.Document(io.BytesIO(word.render(WRITTEN)))
    styled = [(p.style.name, p.text) for p in document.paragraphs]

    assert ("List Number", "Tides") in styled and ("List Number", "Currents") in styled
    assert ("List Bullet 2", "spring tides reach 4 m") in styled
    assert ("List Number", "S1 — survey.pdf, page 2") in styled
    [table] = document.tables
    assert [[cell.text for cell in row.cells] for row in table.rows] == [
        ["Harbour", "Depth (m)"],
        ["Northgate", "12"],
        ["Southwick", "9"],
    ]
    assert table.rows[0].cells[0].paragraphs[0].runs[0].bold


def test_a_citation_in_the_word_document_links_to_its_entry_of_the_sources():
    report = WRITTEN.replace("surveyed [S1].", "surveyed [S1, S7]. Depths vary [S1].")
    document = docx.Document(io.BytesIO(word.render(report)))
    [cited] = [p for p in document.paragraphs if p.text.startswith("Three harbours")]

    assert cited.text == "Three harbours were surveyed [S1, S7]. Depths vary [S1]."
    # S7 is not in the Sources: it links nowhere, and reads as written.
    assert [(link.text, link.fragment) for link in cited.hyperlinks] == [
        ("S1", "source_S1"),
        ("S1", "source_S1"),
    ]
    [entry] = [p for p in document.paragraphs if p.text.startswith("S1 — ")]
    names = entry._p.xpath("./w:bookmarkStart/@w:name")
    assert names == ["source_S1"]


def test_lists_and_tables_survive_in_the_pdf():
    document = pypdfium2.PdfDocument(pdf.render(html.standalone(WRITTEN)))
    text = words(document[0].get_textpage().get_text_range())

    for shown in ("spring tides reach 4 m", "Northgate 12", "Southwick 9", "depth = 12"):
        assert shown in text


def test_a_numbered_list_broken_by_a_paragraph_goes_on_in_the_pdf():
    report = "# T\n\n1. Tides\n2. Currents\n\nA survey of both.\n\n3. Depths\n4. Wrecks\n"
    document = pypdfium2.PdfDocument(pdf.render(html.standalone(report)))
    text = document[0].get_textpage().get_text_range()

    # WeasyPrint writes the markers after the page's text, in order.
    assert re.findall(r"^\s*(\d+)\.", text, re.M) == ["1", "2", "3", "4"], text


def test_a_web_address_is_a_hyperlink_in_the_word_document_and_a_site_path_its_text():
    report = (
        "# T\n\nSee [the **survey**](https://example.com/survey?year=2024&port=2), "
        "[write](mailto:harbours@example.com), [the task](/tasks/1/) and "
        "[this](javascript:alert(1)) [S1].\n"
    )
    document = docx.Document(io.BytesIO(word.render(report)))
    [paragraph] = [p for p in document.paragraphs if p.text.startswith("See")]

    assert [(link.text, link.address) for link in paragraph.hyperlinks] == [
        ("the survey", "https://example.com/survey?year=2024&port=2"),
        ("write", "mailto:harbours@example.com"),
    ]
    assert paragraph.text == "See the survey, write, the task and [this](javascript:alert(1)) [S1]."


def test_a_path_on_the_site_is_its_words_in_the_html_page_which_opens_elsewhere():
    report = (
        "# T\n\nSee [the task](/tasks/1/), [the survey](https://example.com/survey) [S1] "
        "and ![the harbour map](/static/map.png).\n\n## Sources\n\n- S1 — survey.pdf, page 2\n"
    )
    page = html.standalone(report)

    # Opened from a download folder, "/tasks/1/" would lead nowhere, and the image would
    # not load (the page loads nothing from outside the file): their words stay.
    assert "See the task, " in page and 'href="/' not in page
    assert "and the harbour map.</p>" in page and "<img" not in page
    assert '<a href="https://example.com/survey"' in page and 'href="#source-S1"' in page


def text_of(markdown: str, fmt: str) -> str:
    """Return the words a reader of the report's `fmt` file sees, each space one space."""
    if fmt == "html":
        text = re.sub(r"<[^>]+>", " ", html.standalone(markdown).split("<main>")[1])
    elif fmt == "pdf":
        document = pypdfium2.PdfDocument(pdf.render(html.standalone(markdown)))
        text = " ".join(page.get_textpage().get_text_range() for page in document)
    else:
        text = " ".join(p.text for p in docx.Document(io.BytesIO(word.render(markdown))).paragraphs)
    return words(text)


@pytest.mark.parametrize("fmt", ["html", "pdf", "docx"])
def test_a_list_nested_deeper_than_it_is_laid_out_keeps_every_items_words(fmt):
    assert_every_tree(text_of(NESTED_REPORT, fmt))


@pytest.mark.parametrize("shape", sorted(hostile.deeply_nested_markdown()))
def test_markdown_nested_ten_thousand_deep_converts_with_its_words(shape):
    markdown = hostile.deeply_nested_markdown()[shape]

    for fmt, cpu_s in (("docx", 2), ("pdf", 20)):
        started = time.process_time()
        assert "deepest words" in text_of(markdown, fmt)
        assert time.process_time() - started < cpu_s, fmt
