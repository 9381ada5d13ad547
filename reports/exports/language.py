"""Which language a block of text is in, as far as it decides how its letters are drawn.

Chinese, Japanese and Korean share the Han characters, and each draws many of them in
shapes of its own, as Simplified and Traditional Chinese do: a font holding them all (Noto
CJK) needs the text's language to pick the right ones. So a report's language, and a
block's where it differs, is read from its own letters: a text whose letters are mostly
Latin (or of any script but these) is English, the exports' language so far; one mostly of
Han, kana or Hangul is Japanese if it has kana, Korean if it has Hangul (whichever has more,
when both), and Chinese if it has Han characters alone. Han characters alone in a block
inside Japanese or Korean text (a heading of two kanji) are read as that text is. Chinese
is Traditional (`zh-Hant`) when more of its characters are written only so than only in
the Simplified forms (`zh-Hans`), and Simplified when fewer; as many of each (none, in a
heading such as 概要 written alike in both) leaves it as the Chinese text holding it is, and
Simplified elsewhere, the forms the exports drew all Chinese in before. Two hundred of the
most frequent characters whose forms differ are counted (neither form written in the other
writing but seldom), not the thousands of a full table: a sentence of either has several of
them. A text with no letter (a number, a dash) says nothing: it takes the language of what
holds it.
"""

from __future__ import annotations

import functools
import re
import unicodedata

DEFAULT = "en"
JAPANESE, KOREAN = "ja", "ko"
SIMPLIFIED_CHINESE, TRADITIONAL_CHINESE = "zh-Hans", "zh-Hant"
CHINESE = frozenset({SIMPLIFIED_CHINESE, TRADITIONAL_CHINESE})
CJK = frozenset({JAPANESE, KOREAN, *CHINESE})
# Word names a language by its locale (w:lang's w:eastAsia).
WORD = {
    DEFAULT: "en-US",
    JAPANESE: "ja-JP",
    KOREAN: "ko-KR",
    SIMPLIFIED_CHINESE: "zh-CN",
    TRADITIONAL_CHINESE: "zh-TW",
}

# Frequent characters whose Traditional and Simplified forms differ, each written only in
# its own form: the nth character of one table is the nth of the other in the other form.
TRADITIONAL_ONLY = frozenset(
    "們這個說為會來時國對與學過還發經當問長開"
    "關現進動機實車東從見兩種頭話氣無應點電業"
    "體樣麼誰讓間題義處員門聽買賣寫書條號邊總"
    "結論記認識讀語請談該變區華歲視覺親計設許"
    "議選運達遠陽隊際難須傳價優圖團聲將產場報"
    "壓營歷愛戰數斷務勞單專導廣張歸漢滿獨環盡"
    "確離節級屬約組細終給統層線練續職聯腦興舉"
    "藝帶衛補裝複規觀討訓試詞詳調證講護負財師"
    "責貨質費資輕較載轉農連鄉醫釋錢錯鐵態閉閱"
    "陳險隨雖雙雜協韓頁項順預領顯類顧參養億驗"
)
SIMPLIFIED_ONLY = frozenset(
    "们这个说为会来时国对与学过还发经当问长开"
    "关现进动机实车东从见两种头话气无应点电业"
    "体样么谁让间题义处员门听买卖写书条号边总"
    "结论记认识读语请谈该变区华岁视觉亲计设许"
    "议选运达远阳队际难须传价优图团声将产场报"
    "压营历爱战数断务劳单专导广张归汉满独环尽"
    "确离节级属约组细终给统层线练续职联脑兴举"
    "艺带卫补装复规观讨训试词详调证讲护负财师"
    "责货质费资轻较载转农连乡医释钱错铁态闭阅"
    "陈险随虽双杂协韩页项顺预领显类顾参养亿验"
)

_KANA, _HANGUL, _HAN, _OTHER = range(4)
# Every letter of kana, Hangul or Han lies in these ranges (Hangul's jamo, then everything
# from the CJK radicals up): a text with none of them is in the default language, whatever
# else it holds, and needs no letter-by-letter reading (tests/exports/test_language.py).
_MAYBE_CJK = re.compile("[\u1100-\u11ff\u2e80-\U0010ffff]")


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


def may_hold_cjk(text: str) -> bool:
    """Tell whether `text` may hold a letter of Japanese, Korean or Chinese: when not, it
    and every part of it are in the default language."""
    return _MAYBE_CJK.search(text) is not None


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
    if inherited in (JAPANESE, KOREAN):
        return inherited
    return _chinese(text, inherited)


def _chinese(text: str, inherited: str) -> str:
    """Return which writing of Chinese `text` is in, by the characters it writes only so."""
    traditional = sum(char in TRADITIONAL_ONLY for char in text)
    simplified = sum(char in SIMPLIFIED_ONLY for char in text)
    if traditional != simplified:
        return TRADITIONAL_CHINESE if traditional > simplified else SIMPLIFIED_CHINESE
    return inherited if inherited in CHINESE else SIMPLIFIED_CHINESE
