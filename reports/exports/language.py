"""Which language a block of text is in, as far as it decides how its letters are drawn.

Chinese, Japanese and Korean share the Han characters, and each draws many of them in
shapes of its own: a font holding all three (Noto CJK) needs the text's language to pick
the right ones. So a report's language, and a block's where it differs, is read from its
own letters: a text whose letters are mostly Latin (or of any script but these) is English,
the exports' language so far; one mostly of Han, kana or Hangul is Japanese if it has kana,
Korean if it has Hangul (whichever has more, when both), and Chinese if it has Han
characters alone. Han characters alone in a block inside Japanese or Korean text (a heading
of two kanji) are read as that text is. Chinese is Simplified Chinese (`zh-Hans`): nothing
here tells the Traditional characters from the Simplified ones, and the Simplified forms are
those the exports drew Chinese in before. A text with no letter (a number, a dash) says
nothing: it takes the language of what holds it.
"""

from __future__ import annotations

import functools
import unicodedata

DEFAULT = "en"
JAPANESE, KOREAN, CHINESE = "ja", "ko", "zh-Hans"
CJK = frozenset({JAPANESE, KOREAN, CHINESE})
# Word names a language by its locale (w:lang's w:eastAsia).
WORD = {DEFAULT: "en-US", JAPANESE: "ja-JP", KOREAN: "ko-KR", CHINESE: "zh-CN"}

_KANA, _HANGUL, _HAN, _OTHER = range(4)


@functools.cache
def _script(char: str) -> int | None:
    """Return which of the scripts that decide a language the letter is, None if no letter."""
    if not unicodedata.category(char).startswith("L"):
        return None
    name = unicodedata.name(char, "")
    if name.startswith(("HIRAGANA", "KATAKANA", "HALFWIDTH KATAKANA")):
        return _KANA
    if name.startswith(("HANGUL", "HALFWIDTH HANGUL")):
        return _HANGUL
    # The iteration mark 々 (a letter, as is the kana's prolonged sound mark ー) goes with Han.
    if name.startswith(("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH", "IDEOGRAPHIC")):
        return _HAN
    return _OTHER


def language_of(text: str, inherited: str = DEFAULT) -> str | None:
    """Return the language (a BCP 47 tag) `text` is drawn in, where it is held by text in
    the `inherited` language; None when it has no letter to tell."""
    counts = [0, 0, 0, 0]
    for char in text:
        script = _script(char)
        if script is not None:
            counts[script] += 1
    kana, hangul, han, other = counts
    cjk = kana + hangul + han
    if not cjk and not other:
        return None
    if cjk < other:
        return DEFAULT
    if kana or hangul:
        return JAPANESE if kana >= hangul else KOREAN
    return inherited if inherited in CJK else CHINESE
