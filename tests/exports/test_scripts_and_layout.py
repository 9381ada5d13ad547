"""Reports with what does not fit a line, in the PDF.

What a reader meets in the file: where a line sits on the PDF's page.
Converted in this process, as the sandbox's child would.
"""

from __future__ import annotations

import pypdfium2

from reports.exports import html, pdf

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
