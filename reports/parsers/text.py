"""Plain text, and the decoder every text-based format shares.

A plain text is read as paragraphs: the lines a hard-wrapped paragraph was broken into are
joined again, and a word hyphenated at a line's end is mended. Blank lines separate
paragraphs; list items, underlined and "#" headings, table rows and indented or
code-looking blocks keep their lines.
"""

from __future__ import annotations

import codecs
import re
from collections import Counter

from charset_normalizer import from_bytes

from reports.parsers.base import InvalidContent, ParseError, Parser, UnsupportedContent

EMPTY = "The file is empty or contains only whitespace."
NO_TEXT = "The file contains no text."
UNREADABLE = (
    "The file is not readable text: it is not UTF-8 and its encoding could not be "
    "recognised with confidence. Save it as UTF-8 and upload it again."
)

# At most this share of "mess" (charset_normalizer's chaos) in a detected decoding.
MAX_CHAOS = 0.1

# Lines are joined only in blocks whose longest line is at least this long: shorter lines
# (an address, a signature, a verse) were broken by hand, not wrapped.
MIN_WRAP_WIDTH = 40
# A line indented this much more than the text's usual indent is code or a quotation.
CODE_INDENT = 4
# A centred line (a title or a heading, as licences and old manuals set them): its middle
# within this share of the text's width from the text's middle, at most this share of that
# width long, and at least half letters (of what is not a space).
CENTRED_SLACK = 0.08
CENTRED_MAX_SHARE = 0.7
CENTRED_LETTER_SHARE = 0.5
# The text's width is the length this share of its lines do not exceed.
WIDTH_QUANTILE = 0.9

_LIST_ITEM = re.compile(r"\s*(?:[-*+\u2022\u2013]|\(?(?:\d{1,3}|[a-zA-Z])\)|\d{1,3}\.)\s+\S")
_UNDERLINE = re.compile(r"\s*(?:=+|-+|~+|\*+|\^+|_+)\s*")
# Code and prompts; headings, table rows and column layouts: lines never joined with others.
_CODE = re.compile(r"\s*(?:\$ |>>> |\.\.\. )|.*[{};]$")
_LITERAL = re.compile(r"\s*#|.*(?: \| |\S(?: {3,}|\t)\S)")
_HASH_LINE = re.compile(r"^(\s*)#")
_NOT_IN_A_HEADING = re.compile(r"[{}()\[\];=<>$|\\/*_`]")
_SENTENCE_END = re.compile(r"[.!?:][\"')\]\u201d\u2019]*$")
_TAB_WIDTH = 8
_BACKTICKS = re.compile(r"`+")

# Bytes that are not UTF-8, as "surrogateescape" decoding leaves them (U+DC80 to U+DCFF),
# each mapped to its windows-1252 character; a list is str.translate's fastest table.
_STRAY_AS_CP1252 = list(range(0xDC80)) + [
    bytes([byte]).decode("cp1252", "replace") for byte in range(0x80, 0x100)
]
# The share of a file that encoding detection reads (from its start).
DETECT_SAMPLE_BYTES = 256 * 1024

# UTF-32 first: its little-endian BOM begins with UTF-16's.
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)

# Documents of another kind that a wrong file name may carry.
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", "a PDF document"),
    (b"PK\x03\x04", "a zip archive (such as a .docx document)"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "an old-style Office document"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"\x7fELF", "a program"),
)


def decode_text(data: bytes) -> str:
    """Return `data` decoded, without NUL characters, with every newline as "\\n".

    Raise UnsupportedContent for binary data, InvalidContent for text whose encoding cannot
    be recognised with confidence.
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return _normalise(data.decode(codec))
            except UnicodeDecodeError:
                raise InvalidContent(UNREADABLE) from None
    for signature, kind in _SIGNATURES:
        if data.startswith(signature):
            raise UnsupportedContent(f"The file is {kind}, not text.")
    # Without a BOM, a NUL byte means binary data: no text encoding we accept produces one.
    if b"\x00" in data:
        raise UnsupportedContent("The file contains binary data, not text.")
    try:
        return _normalise(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        mended = _mend_mixed(data)
        return _normalise(_detect(data) if mended is None else mended)


def _mend_mixed(data: bytes) -> str | None:
    """Return mostly-UTF-8 text with its stray single bytes read as windows-1252.

    A UTF-8 file with a pasted Latin-1 or windows-1252 passage is the usual "mixed
    encoding". It counts as one when its valid non-ASCII UTF-8 characters are at least as
    many as its stray bytes; otherwise (None) the whole file is in another encoding.

    Every step is a codec or `str.translate` pass, linear and at C speed: a tenth of a
    second for 10 MB, however the two encodings alternate.
    """
    data = data.removeprefix(codecs.BOM_UTF8)
    text = data.decode("utf-8", "surrogateescape")  # each stray byte one surrogate
    valid_only = data.decode("utf-8", "ignore")  # the same text, its stray bytes dropped
    stray = len(text) - len(valid_only)
    valid = len(valid_only) - len(valid_only.encode("ascii", "ignore"))
    if valid < stray:
        return None
    return text.translate(_STRAY_AS_CP1252)


def _detect(data: bytes) -> str:
    # charset_normalizer's time grows with the input and with its mess: it judges a sample
    # cut at a line's end, and the whole file is then decoded by the codec it chose.
    sample = data[:DETECT_SAMPLE_BYTES]
    if len(data) > DETECT_SAMPLE_BYTES and b"\n" in sample:
        sample = sample[: sample.rindex(b"\n") + 1]
    matches = from_bytes(sample)
    best = matches.best()
    if best is None or best.chaos > MAX_CHAOS:
        raise InvalidContent(UNREADABLE)
    tied = [m for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
    if len({str(m) for m in tied}) == 1:
        encoding = best.encoding
    elif any("cp1252" in m.could_be_from_charset for m in tied):
        # A short Western text fits several single-byte code pages equally well
        # (charset_normalizer then tends to pick cp1250 and turns "è" into "č");
        # windows-1252, the superset of Latin-1 that browsers assume for unlabelled text,
        # is by far the likeliest of them.
        encoding = "cp1252"
    else:
        raise InvalidContent(UNREADABLE)
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        raise InvalidContent(UNREADABLE) from None


def _normalise(text: str) -> str:
    # A form feed in structured text marks a PDF's page; a text file's own is a line break.
    return text.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n")


def decode_for_extract(data: bytes) -> str:
    """Return decode_text(data), raising ParseError instead of the submit-time exceptions."""
    try:
        return decode_text(data)
    except (InvalidContent, UnsupportedContent) as exc:
        raise ParseError(str(exc)) from None


class TextParser(Parser):
    extensions = (".txt",)
    media_type = "text/plain"
    version = "5"

    def check(self, data: bytes) -> None:
        if not decode_text(data).strip():
            raise InvalidContent(EMPTY)

    def extract(self, data: bytes) -> str:
        text = decode_for_extract(data)
        if not text.strip():
            raise ParseError(NO_TEXT)
        return paragraphs(text)


def join_wrapped(lines: list[str]) -> str:
    """Join the lines of one paragraph, mending words hyphenated at a line's end."""
    joined = lines[0]
    for line in lines[1:]:
        if joined.endswith("-") and joined[-2:-1].isalpha() and line[:1].islower():
            joined = joined[:-1] + line
        else:
            joined += " " + line
    return joined


def fenced(code: str) -> str:
    """Return `code` in a ``` fence longer than any run of backticks inside it."""
    longest = max((len(run) for run in _BACKTICKS.findall(code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{code}\n{fence}"


def paragraphs(text: str) -> str:
    """Return a plain text with each hard-wrapped paragraph on one line.

    Blocks are separated by blank lines. In a block, a line goes on on the next one when
    the next line's first word would not have fitted on it (the text was wrapped there),
    or when it is long and stops mid-sentence. Underlined headings, list items (each its
    own line, its wrapped lines joined), table rows and code keep their lines; a block of
    indented or code-looking lines only is put in a ``` fence. A block of centred lines is
    a heading: the title when the text opens with it. Tabs are kept as they are (they count
    as eight columns only for indents and widths), so that what is counted is what is sent.
    """
    lines = [line.rstrip() for line in text.split("\n")]
    indents = Counter(_indent(line) for line in lines if line)
    base = indents.most_common(1)[0][0] if indents else 0
    width = _text_width(lines)
    out: list[str] = []
    block: list[str] = []
    code: list[list[str]] = []  # consecutive code blocks, one fence

    def flush() -> None:
        if not block:
            return
        if all(_is_centred(line, base, width) for line in block):
            close_code()
            first, *rest = (" ".join(line.split()) for line in block)
            out.append(f"{'##' if out else '#'} {first}")
            if rest:
                out.append("\n".join(rest))
        elif all(_is_code(line, base) for line in block):
            code.append(list(block))
        else:
            close_code()
            out.append("\n".join(_reflow(_comments_escaped(block, base), base)))
        block.clear()

    def close_code() -> None:
        if code:
            out.append(fenced("\n\n".join("\n".join(lines) for lines in code)))
            code.clear()

    for line in lines:
        if line:
            block.append(line)
        else:
            flush()
    flush()
    close_code()
    return "\n\n".join(out)


def _columns(line: str) -> int:
    return len(line.expandtabs(_TAB_WIDTH))


def _indent(line: str) -> int:
    expanded = line.expandtabs(_TAB_WIDTH)
    return len(expanded) - len(expanded.lstrip())


def _text_width(lines: list[str]) -> int:
    widths = sorted(_columns(line) for line in lines if line)
    return widths[int(WIDTH_QUANTILE * (len(widths) - 1))] if widths else 0


def _is_code(line: str, base: int) -> bool:
    return _indent(line) >= base + CODE_INDENT or bool(_CODE.match(line))


def _comments_escaped(block: list[str], base: int) -> list[str]:
    """Escape the "#" of comment lines, so that a script's comment is never a heading.

    A "#" line is a heading when it stands alone, between blank lines; among other lines it
    is a comment.
    """
    marked = [i for i, line in enumerate(block) if _HASH_LINE.match(line)]
    if not marked or len(block) == 1:
        return block
    return [_HASH_LINE.sub(r"\1\\#", line) if i in marked else line for i, line in enumerate(block)]


def _is_centred(line: str, base: int, width: int) -> bool:
    text = line.strip()
    indent = _indent(line)
    middle = indent + len(text) / 2
    return (
        indent >= base + CODE_INDENT
        and len(text) <= CENTRED_MAX_SHARE * (width - base)
        and abs(middle - (base + width) / 2) <= CENTRED_SLACK * width
        and sum(ch.isalpha() for ch in text) >= CENTRED_LETTER_SHARE * len(text.replace(" ", ""))
        and not _NOT_IN_A_HEADING.search(text)
        and not _CODE.match(line)
    )


def _reflow(block: list[str], base: int) -> list[str]:
    literal = [
        bool(_LITERAL.match(line) or _CODE.match(line))
        or _UNDERLINE.fullmatch(line) is not None
        or (i + 1 < len(block) and _UNDERLINE.fullmatch(block[i + 1]) is not None)
        for i, line in enumerate(block)
    ]
    width = max(
        (_columns(line) for line, kept in zip(block, literal, strict=True) if not kept),
        default=0,
    )
    out: list[list[str]] = []
    item = False  # the paragraph being joined is a list item
    for i, line in enumerate(block):
        starts_item = bool(_LIST_ITEM.match(line))
        indented = _indent(line) >= base + CODE_INDENT and not item
        if (
            i
            and out
            and not literal[i]
            and not literal[i - 1]
            and not starts_item
            and not indented
            and width >= MIN_WRAP_WIDTH
            and _wrapped(block[i - 1], line, width)
        ):
            out[-1].append(line.strip())
        else:
            out.append([line])
            item = starts_item
    return [join_wrapped(lines) for lines in out]


def _wrapped(line: str, following: str, width: int) -> bool:
    """Tell whether `line` was broken only because `following`'s first word did not fit."""
    first_word = following.split()[0]
    if _columns(line) + 1 + len(first_word) > width:
        return True
    return _columns(line) >= width / 2 and not _SENTENCE_END.search(line)
