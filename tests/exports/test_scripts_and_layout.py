"""Reports in other scripts, right to left, and with what does not fit a line, in each format.

What a reader meets in the file: the face each letter is drawn in, where a line sits on the
PDF's page, the `dir` of the HTML page's blocks, the Word document's right-to-left marks.
Converted in this process, as the sandbox's child would.
"""

from __future__ import annotations

import ctypes
import functools
import io
import unicodedata

import docx
import pypdfium2
import pypdfium2.raw as pdfium
import pytest
from docx.oxml.ns import qn

from reports.exports import docx as word
from reports.exports import html, pdf

SCRIPTS = """# Harbour survey

Chinese: 港口调查显示三个港口的水深不同.

Traditional: 港口調查顯示三個港口的水深不同.

Japanese: 港湾の調査では、ひらがなとカタカナ。

Korean: 항구 조사 결과 세 항구의 수심이 다릅니다.

Hindi: बंदरगाह सर्वेक्षण में तीन बंदरगाहों की गहराई अलग थी।

مرحبا بالعالم، هذا تقرير عن 3 موانئ في عام 2024 مع Northgate و Southwick [S1].

שלום עולם, זה דוח על 3 נמלים עם Haifa.

- قائمة الموانئ
  - Northgate
- נמל חיפה

| עיר | العمق | הערה |
|---|---|---|
| חיפה | 12 | עמוק |

Three harbours were surveyed.

## Sources

- S1 — survey.pdf, page 2
"""

# The face each script is drawn in: the body's font stack names one serif face a script
# (templates/reports/export.html), from Debian's fonts-noto-cjk and fonts-noto-core.
FACES = {
    "CJK": "Noto-Serif-CJK",
    "HIRAGANA": "Noto-Serif-CJK",
    "KATAKANA": "Noto-Serif-CJK",
    "HANGUL": "Noto-Serif-CJK",
    "DEVANAGARI": "Noto-Serif-Devanagari",
    "ARABIC": "Noto-Naskh-Arabic",
    "HEBREW": "Noto-Serif-Hebrew",
}

# Reports in Japanese, Korean and Traditional Chinese: a Han-only heading, an English line,
# Han characters whose shapes differ between the languages (直, 骨, 角), a list, code and a
# table.
JAPANESE = """# 港湾調査

## 概要

三つの港湾の水深を調査した。直角の岸壁は骨組みが古い。

Northgate and Southwick were surveyed in 2024.

- 北港は深い
- `港湾コード` は一覧にある

| 港 | 水深 |
|---|---|
| 北港 | 12 |
"""
KOREAN = """# 항구 조사

## 요약

세 항구의 수심을 조사했다. 直角 岸壁의 骨組는 오래되었다.

- 북항은 깊다
- `항구 코드` 목록

| 항구 | 수심 |
|---|---|
| 북항 | 12 |
"""
TRADITIONAL = """# 港口調查

## 概要

我們調查了三個港口的水深。這個直角碼頭的骨架很舊。

- 北港較深
- `港口代碼` 在清單中

| 港口 | 水深 |
|---|---|
| 北港 | 12 |
"""
# The faces of Noto CJK each language's letters are drawn in: the body's serif, in bold in
# the table's header, the headings' sans and the code's monospace.
CJK_FACES = {
    lang: {
        f"Noto-Serif-CJK-{lang}",
        f"Noto-Serif-CJK-{lang}-Bold",
        f"Noto-Sans-CJK-{lang}-Bold",
        f"Noto-Sans-Mono-CJK-{lang}",
    }
    for lang in ("JP", "KR", "TC")
}

WIDE = (
    "# Long lines\n\n"
    + "A word: "
    + "Donaudampfschifffahrtsgesellschaftskapitän" * 5
    + "\n\nAn address: https://example.com/"
    + "survey/harbour/" * 30
    + "\n\nInline code: `"
    + "depth_" * 60
    + "`\n\n```\n"
    + "depths = [" + ", ".join(str(n) for n in range(80)) + "]"
    + "\n```\n\n| "
    + " | ".join(f"Harbour{n}" for n in range(14))
    + " |\n|"
    + "---|" * 14
    + "\n| "
    + " | ".join(f"measured-depth-{n}-metres" for n in range(14))
    + " |\n"
)  # fmt: skip


@functools.cache
def scripts_pdf() -> pypdfium2.PdfTextPage:
    document = pypdfium2.PdfDocument(pdf.render(html.standalone(SCRIPTS)))
    assert len(document) == 1
    return document[0].get_textpage()


def font_of(textpage: pypdfium2.PdfTextPage, index: int) -> str:
    size = pdfium.FPDFText_GetFontInfo(textpage, index, None, 0, None)
    name = ctypes.create_string_buffer(size)
    pdfium.FPDFText_GetFontInfo(textpage, index, name, size, ctypes.byref(ctypes.c_int()))
    return name.value.decode()


def box_of(textpage: pypdfium2.PdfTextPage, found: str) -> tuple[float, float, float, float]:
    """Return the box (left, bottom, right, top) of the first place `found` is shown."""
    searcher = textpage.search(found)
    start, count = searcher.get_next()
    boxes = [textpage.get_charbox(i) for i in range(start, start + count)]
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


def test_each_script_is_drawn_in_a_face_that_has_it():
    textpage = scripts_pdf()
    seen = set()
    for index in range(textpage.count_chars()):
        char = textpage.get_text_range(index, 1)
        script = unicodedata.name(char, "").split(" ")[0] if char.strip() else ""
        if script in FACES and unicodedata.category(char)[0] in "LM":
            seen.add(script)
            face = font_of(textpage, index)
            # Without a face for the script, the letter is drawn as a box, in DejaVu.
            assert FACES[script] in face, (
                f"{char!r} ({script}) is drawn in {face}: the PDF needs Debian's "
                "fonts-noto-cjk and fonts-noto-core (docs/production.md), named in the "
                "page's font stack"
            )
    assert seen == set(FACES)


def cjk_faces(textpage: pypdfium2.PdfTextPage, start: int = 0, count: int | None = None):
    """Return the faces the Han, kana and Hangul letters from `start` on are drawn in."""
    faces = set()
    for index in range(start, start + (textpage.count_chars() if count is None else count)):
        name = unicodedata.name(textpage.get_text_range(index, 1), "")
        if name.startswith(("CJK UNIFIED", "HIRAGANA", "KATAKANA", "HANGUL")):
            faces.add(font_of(textpage, index).split("+")[-1])  # less the subset's tag
    return faces


@pytest.mark.parametrize(
    ("report", "face"),
    [
        pytest.param(JAPANESE, "JP", id="japanese"),
        pytest.param(KOREAN, "KR", id="korean"),
        pytest.param(TRADITIONAL, "TC", id="traditional-chinese"),
    ],
)
def test_a_japanese_korean_or_traditional_chinese_report_is_drawn_in_its_shapes_in_the_pdf(
    report, face
):
    document = pypdfium2.PdfDocument(pdf.render(html.standalone(report)))

    # Not the Simplified Chinese face, which draws 直, 骨 and 角 as Chinese writes them.
    assert cjk_faces(document[0].get_textpage()) == CJK_FACES[face]


def test_each_paragraph_of_chinese_japanese_or_korean_is_drawn_in_its_languages_face():
    textpage = scripts_pdf()
    for line, face in (
        ("Chinese:", "SC"),
        ("Traditional:", "TC"),
        ("Japanese:", "JP"),
        ("Korean:", "KR"),
    ):
        start, _count = textpage.search(line).get_next()
        end, _count = textpage.search("\n", index=start).get_next()
        assert cjk_faces(textpage, start, end - start) == {f"Noto-Serif-CJK-{face}"}, line


def test_the_html_page_says_the_language_of_the_report_and_of_each_block_in_another():
    japanese, korean, traditional, scripts = (
        html.standalone(r) for r in (JAPANESE, KOREAN, TRADITIONAL, SCRIPTS)
    )

    assert japanese.startswith('<!DOCTYPE html>\n<html lang="ja">')
    assert "<h2>概要</h2>" in japanese  # Han alone, in a Japanese report: Japanese
    assert '<p lang="en">Northgate and Southwick' in japanese
    assert korean.startswith('<!DOCTYPE html>\n<html lang="ko">')
    assert "<p>세 항구의 수심을 조사했다. 直角" in korean
    assert traditional.startswith('<!DOCTYPE html>\n<html lang="zh-Hant">')
    assert "<h2>概要</h2>" in traditional  # written alike in both forms: as the report is
    assert scripts.startswith('<!DOCTYPE html>\n<html lang="en">')
    assert '<p lang="zh-Hans">Chinese: 港口调查' in scripts
    assert '<p lang="zh-Hant">Traditional: 港口調查' in scripts
    assert '<p lang="ja">Japanese: 港湾の調査' in scripts
    assert '<p lang="ko">Korean: 항구 조사' in scripts
    assert '<p dir="rtl">مرحبا بالعالم' in scripts


def test_the_word_document_says_the_east_asian_language_of_the_report_and_its_paragraphs():
    def east_asian(report: str) -> tuple[str, dict[str, set[str]]]:
        document = docx.Document(io.BytesIO(word.render(report)))
        defaults = document.styles.element.find(qn("w:docDefaults"))
        paragraphs = [
            *document.paragraphs,
            *(p for t in document.tables for c in t._cells for p in c.paragraphs),
        ]
        return defaults.find(f".//{qn('w:lang')}").get(qn("w:eastAsia")), {
            p.text: {lang.get(qn("w:eastAsia")) for lang in p._p.iter(qn("w:lang"))}
            for p in paragraphs
        }

    document, paragraphs = east_asian(JAPANESE)
    assert document == "ja-JP" and not any(paragraphs.values())
    document, paragraphs = east_asian(KOREAN)
    assert document == "ko-KR" and not any(paragraphs.values())
    document, paragraphs = east_asian(TRADITIONAL)
    assert document == "zh-TW" and not any(paragraphs.values())
    document, paragraphs = east_asian(SCRIPTS)
    assert document == "en-US"
    assert paragraphs["Chinese: 港口调查显示三个港口的水深不同."] == {"zh-CN"}
    assert paragraphs["Traditional: 港口調查顯示三個港口的水深不同."] == {"zh-TW"}
    assert paragraphs["Japanese: 港湾の調査では、ひらがなとカタカナ。"] == {"ja-JP"}
    assert paragraphs["Korean: 항구 조사 결과 세 항구의 수심이 다릅니다."] == {"ko-KR"}
    assert paragraphs["Three harbours were surveyed."] == set()


def test_an_arabic_paragraph_reads_right_to_left_in_the_pdf():
    textpage = scripts_pdf()
    page_width = 595.28
    northgate, southwick = box_of(textpage, "Northgate"), box_of(textpage, "Southwick")
    english = box_of(textpage, "Three harbours")

    # Set right to left, the English names come in the sentence's order from the right, and
    # the paragraph ends at the right margin, where the English one begins at the left.
    assert southwick[2] < northgate[0]
    arabic_line = [
        textpage.get_charbox(i)
        for i in range(textpage.count_chars())
        if abs(textpage.get_charbox(i)[1] - northgate[1]) < 2
    ]
    # (A glyph's box is its ink, a few points inside the line's edge.)
    assert abs(page_width - max(box[2] for box in arabic_line) - english[0]) < 8
    assert min(box[0] for box in arabic_line) > english[0] + 20
    # The table's first column is on the right.
    assert box_of(textpage, "חיפה")[0] > box_of(textpage, "עמוק")[2]


def test_right_to_left_blocks_are_marked_in_the_html_page():
    page = html.standalone(SCRIPTS)

    assert '<p dir="rtl">مرحبا بالعالم' in page
    assert '<p dir="rtl">שלום עולם' in page
    # A list is set as its first item, and an English list inside it back left to right.
    assert '<ul dir="rtl">\n<li>قائمة الموانئ\n<ul dir="ltr">' in page
    assert '<table dir="rtl">' in page
    assert "<p>Three harbours were surveyed.</p>" in page
    assert '<li id="source-S1"><a href="#source-S1"' in page


def test_right_to_left_paragraphs_and_tables_in_the_word_document():
    document = docx.Document(io.BytesIO(word.render(SCRIPTS)))
    right_to_left = {
        p.text: p._p.pPr is not None and p._p.pPr.find(qn("w:bidi")) is not None
        for p in document.paragraphs
    }

    assert right_to_left[
        "مرحبا بالعالم، هذا تقرير عن 3 موانئ في عام 2024 مع Northgate و Southwick [S1]."
    ]
    assert right_to_left["שלום עולם, זה דוח על 3 נמלים עם Haifa."]
    assert right_to_left["قائمة الموانئ"] and not right_to_left["Northgate"]
    assert not right_to_left["Three harbours were surveyed."]
    [table] = document.tables
    assert table._tbl.tblPr.find(qn("w:bidiVisual")) is not None


def test_long_words_addresses_code_and_wide_tables_stay_on_the_page():
    document = pypdfium2.PdfDocument(pdf.render(html.standalone(WIDE)))
    shown = ""
    for page in document:
        width, _height = page.get_size()
        textpage = page.get_textpage()
        for index in range(textpage.count_chars()):
            left, _bottom, right, _top = textpage.get_charbox(index)
            char = textpage.get_text_range(index, 1)
            assert left >= 0 and right <= width, f"{char!r} is off the page: {left} to {right}"
        shown += textpage.get_text_range()
    flat = "".join(shown.replace("\ufffe", "-").split())  # PDFium marks a hyphen ending a line

    # Each of the table's columns is there whole, its words broken at the column's edge.
    for n in range(14):
        assert f"Harbour{n}" in flat and f"measured-depth-{n}-metres" in flat
    assert "Donaudampfschifffahrtsgesellschaftskapitän" * 5 in flat
    assert ", ".join(str(n) for n in range(80)).replace(" ", "") in flat
