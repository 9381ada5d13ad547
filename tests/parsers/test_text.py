from __future__ import annotations

import codecs
import random
import textwrap
import time

import pytest

from reports.parsers import InvalidContent, ParseError, UnsupportedContent
from reports.parsers.text import TextParser, decode_text
from tests.security import hostile

parser = TextParser()


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        ("Café crème brûlée à la façon de Noël", "latin-1"),
        ("Le café est très chaud. Où est la crème brûlée? Voilà, ça marche.\n" * 5, "latin-1"),
        ("Grüße aus München. Die Straße ist schön, über alles.\n" * 3, "latin-1"),
        ("“Smart quotes” \u2013 and a euro € sign, naïve café", "cp1252"),
        ("Привет, мир! Это тестовый документ на русском языке.\n" * 3, "cp1251"),
    ],
    ids=["latin1-short", "latin1-long", "latin1-german", "cp1252", "cp1251"],
)
def test_legacy_encodings_are_decoded(text: str, encoding: str) -> None:
    data = text.encode(encoding)

    parser.check(data)
    assert decode_text(data) == text


@pytest.mark.parametrize(
    "encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"]
)
def test_utf16_and_utf32_with_a_bom_are_decoded(encoding: str) -> None:
    text = "Unicode — ünïcödé — 统一码\nsecond line"
    bom = b"" if encoding in ("utf-16", "utf-32") else _bom(encoding)

    data = bom + text.encode(encoding)

    parser.check(data)
    assert parser.extract(data) == text


def _bom(encoding: str) -> bytes:
    return {
        "utf-16-le": codecs.BOM_UTF16_LE,
        "utf-16-be": codecs.BOM_UTF16_BE,
        "utf-32-le": codecs.BOM_UTF32_LE,
        "utf-32-be": codecs.BOM_UTF32_BE,
    }[encoding]


def test_the_utf8_bom_is_dropped() -> None:
    assert decode_text(codecs.BOM_UTF8 + b"hello") == "hello"


def test_newlines_are_normalised_and_nul_characters_dropped() -> None:
    data = "one\r\ntwo\rthree\x00\nfour".encode("utf-16")

    assert parser.extract(data) == "one\ntwo\nthree\nfour"


def test_undecodable_bytes_are_not_readable_text() -> None:
    noise = random.Random(1).randbytes(4000).replace(b"\x00", b"\x01")

    with pytest.raises(InvalidContent, match="not readable text"):
        parser.check(noise)
    with pytest.raises(ParseError, match="not readable text"):
        parser.extract(noise)


def test_a_broken_utf16_file_is_not_readable_text() -> None:
    with pytest.raises(InvalidContent, match="not readable text"):
        parser.check(codecs.BOM_UTF16_LE + b"a\x00\x00\xdc")


@pytest.mark.parametrize(
    "data",
    [b"text with a \x00 NUL byte", b"%PDF-1.7\n1 0 obj", b"PK\x03\x04\x14\x00"],
    ids=["nul", "pdf", "zip"],
)
def test_binary_content_is_unsupported(data: bytes) -> None:
    with pytest.raises(UnsupportedContent):
        parser.check(data)


def test_whitespace_in_utf16_is_still_empty() -> None:
    with pytest.raises(InvalidContent, match="empty"):
        parser.check(" \n\t ".encode("utf-16"))


PARAGRAPHS = [
    "Tidal power converts the energy of the tides into electricity. Because the tides "
    "follow the moon, the output of a tidal station can be forecast years ahead, "
    "unlike that of wind or solar farms, which follow the weather.",
    "Small harbours are a good fit: their breakwaters already enclose a basin, and a "
    "turbine in the harbour mouth needs no new dam. Maintenance is the main cost, "
    "since salt water and marine growth wear the blades down.",
]


@pytest.mark.parametrize("width", [60, 72, 79])
def test_a_hard_wrapped_text_is_read_as_paragraphs(width: int) -> None:
    wrapped = "\n\n".join(textwrap.fill(p, width) for p in PARAGRAPHS)
    assert wrapped.count("\n") > 4

    assert parser.extract(wrapped.encode()) == "\n\n".join(PARAGRAPHS)


def test_a_word_hyphenated_at_a_line_end_is_mended() -> None:
    text = (
        "The harbour authority measured the currents for three years before it de-\n"
        "cided where the turbines should go, and published every measurement."
    )

    assert parser.extract(text.encode()) == (
        "The harbour authority measured the currents for three years before it decided "
        "where the turbines should go, and published every measurement."
    )


def test_headings_lists_and_short_lines_keep_their_lines() -> None:
    text = (
        "1. Introduction\n"
        "===============\n"
        "\n"
        "The survey covered three harbours on the north coast and two on the west\n"
        "coast:\n"
        "\n"
        "- Porthleven, where the basin is deep enough for two turbines of the\n"
        "  larger size that the manufacturer offers\n"
        "- Newlyn\n"
        "- St Ives\n"
        "\n"
        "Harbour Office\n"
        "1 Quay Street\n"
        "Porthleven\n"
    )

    assert parser.extract(text.encode()) == (
        "1. Introduction\n"
        "===============\n"
        "\n"
        "The survey covered three harbours on the north coast and two on the west coast:\n"
        "\n"
        "- Porthleven, where the basin is deep enough for two turbines of the larger size "
        "that the manufacturer offers\n"
        "- Newlyn\n"
        "- St Ives\n"
        "\n"
        "Harbour Office\n"
        "1 Quay Street\n"
        "Porthleven"
    )


def test_indented_and_code_looking_blocks_are_kept_as_code() -> None:
    text = (
        "Read the gauge with the following function, which returns the height of the\n"
        "water in metres:\n"
        "\n"
        "    def height(gauge):\n"
        "        return gauge.read() / 100\n"
        "\n"
        "    print(height(gauge))\n"
        "\n"
        "int main(void) {\n"
        "    return 0;\n"
        "}\n"
    )

    assert parser.extract(text.encode()) == (
        "Read the gauge with the following function, which returns the height of the "
        "water in metres:\n"
        "\n"
        "```\n"
        "    def height(gauge):\n"
        "        return gauge.read() / 100\n"
        "\n"
        "    print(height(gauge))\n"
        "\n"
        "int main(void) {\n"
        "    return 0;\n"
        "}\n"
        "```"
    )


def test_a_markdown_looking_text_keeps_its_headings_lists_and_tables() -> None:
    markdown = "# Title\n\nSome text.\n\n- item\n- item two\n\na | b\nc | d\n"

    assert parser.extract(markdown.encode()) == markdown.rstrip("\n")


def test_utf8_with_a_pasted_windows_1252_passage_is_mended_not_garbled() -> None:
    data = "Le café est très bon. ".encode() * 3 + "Un naïf garçon \u2013 enfin.".encode("cp1252")
    assert decode_text(data) == "Le café est très bon. " * 3 + "Un naïf garçon \u2013 enfin."


def test_a_legacy_file_with_one_accidental_utf8_pair_is_still_detected_as_a_whole() -> None:
    text = "Это тестовый текст о приливной энергии в малых гаванях. " * 3 + "Ж«"  # noqa: RUF001
    assert decode_text(text.encode("cp1251")) == text


def test_a_text_files_form_feeds_are_line_breaks_not_pages() -> None:
    # Only a PDF's structured text marks pages; an old text file's form feeds are not its.
    text = parser.extract(b"The first page ends here.\n\x0cThe second page starts here.\n")

    assert "\f" not in text
    assert "The first page ends here." in text and "The second page starts here." in text


def test_centred_lines_are_the_title_and_the_headings_not_code() -> None:
    # As the GNU licences set their title and their parts.
    body = textwrap.fill(PARAGRAPHS[0], 72)
    text = (
        f"{'HARBOUR POWER CHARTER':^72}\n{'Version 3, 29 June 2007':^72}\n\n"
        f"{body}\n\n{'Preamble':^72}\n\n{body}\n"
    )

    assert parser.extract(text.encode()) == (
        f"# HARBOUR POWER CHARTER\n\nVersion 3, 29 June 2007\n\n{PARAGRAPHS[0]}\n\n"
        f"## Preamble\n\n{PARAGRAPHS[0]}"
    )


def test_tabs_are_kept_so_that_what_is_counted_is_what_is_sent() -> None:
    text = "'tide'\tnumber\t(default 8)\n\t\tThe height of the tide, in metres.\n"

    extracted = parser.extract(text.encode())

    assert "\t" in extracted
    assert len(extracted) <= len(text)


def test_a_scripts_comment_lines_never_become_headings() -> None:
    text = "Start the pump:\n\n# pid database name prepend path\nPIDFILE=/run/pump.pid\nrun\n"

    extracted = parser.extract(text.encode())

    assert not any(line.startswith("#") for line in extracted.splitlines())
    assert "\\# pid database name prepend path" in extracted


def test_a_large_file_of_mixed_encodings_is_decoded_in_bounded_time() -> None:
    # Each stray byte used to cost a Python call: 15 s for 9 MB in the web process at upload.
    data = hostile.mixed_encoding_text(9)
    started = time.process_time()
    parser.check(data)
    text = decode_text(data)
    assert time.process_time() - started < 1.5
    assert text.startswith("éaé éaé ")
