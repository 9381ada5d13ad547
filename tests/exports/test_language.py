"""Which language a report's letters say it is in: the shapes its Han characters are drawn in."""

from __future__ import annotations

import pytest

from reports.exports.language import language_of, may_hold_cjk

TRADITIONAL = "我們調查了這個地區的三個港口。每個港口的水深都不一樣。潮汐與河流對它們的影響不同。"
SIMPLIFIED = "我们调查了这个地区的三个港口。每个港口的水深都不一样。潮汐与河流对它们的影响不同。"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(TRADITIONAL, "zh-Hant", id="traditional"),
        pytest.param(SIMPLIFIED, "zh-Hans", id="simplified"),
        # Kanji written as Traditional Chinese writes them (國, 學, 會) do not make it Chinese.
        pytest.param("國語の學會は東京で開かれ、三つの港を調べた。", "ja", id="japanese"),
        pytest.param("Three harbours were surveyed (港口調查) in 2024.", "en", id="english"),
    ],
)
def test_a_passage_is_read_in_its_language(text, expected):
    assert language_of(text) == expected


def test_chinese_written_alike_in_both_forms_is_read_as_the_chinese_holding_it():
    assert language_of("概要", "zh-Hant") == "zh-Hant"
    assert language_of("概要") == "zh-Hans"  # as all Chinese was drawn before
    # A passage that says which it is, says so inside the other.
    assert language_of(SIMPLIFIED, "zh-Hant") == "zh-Hans"
    assert language_of(TRADITIONAL, "zh-Hans") == "zh-Hant"
    # Inside Japanese, kanji alone stay Japanese, whatever forms they are written in.
    assert language_of("學會", "ja") == "ja"


def test_only_text_that_may_hold_japanese_korean_or_chinese_is_read_letter_by_letter():
    """The shortcut for the most reports: no letter of the three scripts lies outside the
    ranges `may_hold_cjk` looks for, so a text without them is the default language."""
    outside = (
        chr(point)
        for point in range(0x2E80)
        if not 0x1100 <= point <= 0x11FF and not 0xD800 <= point <= 0xDFFF
    )
    assert {language_of(char) for char in outside} == {None, "en"}
    english = "It\u2019s \u201cpredictable\u201d \u2014 42 % of power, \u00bd of it tidal."
    assert not may_hold_cjk(english)
    assert all(may_hold_cjk(text) for text in ("港", "か", "한", "\u1100", "\U00020000"))
