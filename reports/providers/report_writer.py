"""An extractive analysis report, written without a model: the simulated provider's text.

Deterministic and offline. The input is the parsers' structured text (docs/parsers.md): a
"#" title, section headings, paragraphs, lists, tables and code fences. Summary sentences
are ranked with TextRank (a sentence is central when sentences like it are central), only
among sentences that read as prose, a chapter that reads as an API reference (much of it
declarations and their descriptions) counting less than the chapters that explain; key
terms are the document's words weighted by TF-IDF across its paragraphs, never identifiers
or their fragments.

Given the passages a call reads (docs/api.md, "Passages, parts and citations"), it reads
their text and ends every sentence it quotes with the id of the passage it came from:
`[S12]`. It writes a plan's notes the same way (bullets, the most central first), combines
notes by keeping their most central bullets, and writes a report from notes alone keeping
their citations.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from reports import wording
from reports.providers import table_facts
from reports.providers.base import SourceDocument
from reports.providers.table_facts import Table

TITLE_CHARS = 80
SENTENCE_CHARS = 400
NAME_CHARS = 120
HEADING_CHARS = 80
MAX_HEADINGS_LISTED = 40
MAX_HEADING_DEPTH = 6  # across all documents, so the report stays well under its cap
INSTRUCTIONS_CHARS = 4000
KEY_TERMS = 10
KEY_POINTS = 5
TABLES_LISTED = 5
# How a plan's notes say what a table holds, so that the report from notes lists it too.
TABLE_NOTE = "**Table:** "
# How they count the tables they do not list, so that the report counts every table.
MORE_TABLES_NOTE = "**Tables not listed:** "
NOTES_PER_PART = 8  # bullets in the notes on one part
NOTES_COMBINED = 12  # bullets kept when notes are combined
MIN_SENTENCE_WORDS = 4
# A sentence fit for the summary: this many words at least, mostly words (not numbers,
# symbols or identifiers), ending as sentences end.
MIN_PROSE_WORDS = 6
MAX_PROSE_WORDS = 60  # longer "sentences" are lists or tables run together
MIN_PROSE_WORD_SHARE = 0.75
MAX_IDENTIFIER_SHARE = 0.1
# TextRank compares sentences pairwise: it ranks at most this many, the best by term weight.
TEXTRANK_CANDIDATES = 300
TEXTRANK_DAMPING = 0.85
TEXTRANK_ROUNDS = 40
TITLE_WORDS = 15

_STOP_WORDS_TEXT = """
    a about above after again against all almost also although always am among an and
    another any are aren't around as at be became because become been before being below
    between both but by can cannot could couldn't did didn't do does doesn't doing don't
    down during each either else enough even ever every few for from further get gets got
    had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers
    herself him himself his how how's however i i'd i'll i'm i've if in into is isn't it
    it's its itself just least less let's like made make makes many may me might more most
    much must mustn't my myself neither never no nor not now of off often on once one only
    onto or other others ought our ours ourselves out over own per perhaps quite rather
    really same see several shall shan't she she'd she'll she's should shouldn't since so some
    still such than that that's the their theirs them themselves then there there's
    therefore these they they'd they'll they're they've this those though through thus to
    too under until up upon us usually very was wasn't we we'd we'll we're we've well were
    weren't what what's whatever when when's where where's whether which while who who's
    whom whose why why's will with within without won't would wouldn't yet you you'd
    you'll you're you've your yours yourself yourselves
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

_WORD = re.compile(r"[^\W\d_]+(?:['\u2019\-][^\W\d_]+)*")
_ANY_WORD = re.compile(r"\w+")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LINE_MARKER = re.compile(r"^\s*(?:>\s*)*(?:[-*+]\s+|\d{1,9}[.)]\s+)?")
_SENTENCE_END = re.compile(r"(?<=[.!?\u2026])[\"'\u201d\u2019)\]]*\s+")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Backslash-escaped everywhere: these characters start inline structure; a `#` only where
# it would close a heading.
_INLINE_SPECIAL = re.compile(r"([\\`*_\[\]<|]|&(?=#?\w+;)|#(?=#*[ \t]*$))")
# Escaped only at the start of a line, where they would open a block ("1. Summary" inside
# a line is text, and is written as it was).
_BLOCK_START = re.compile(r"^(?:([-+=>#~])|(\d{1,9})([.)]))")
_LIST_ITEM = re.compile(r"^\s*(?:>\s*)*(?:[-*+]|\d{1,9}[.)])\s+")
_TOKEN = re.compile(r"\S+")
_EMPHASIS = re.compile(r"(?<!\w)[*_`~]+|[*_`~]+(?!\w)")
_EDGE_PUNCTUATION = re.compile(r"^[\W_]+|[\W_]+$")
_PLAIN_WORD = re.compile(r"[^\W\d_]+(?:['\u2019\-][^\W\d_]+)*")
_CAMEL = re.compile(r"[a-z][A-Z]")
# A token of code: an identifier (snake_case, camelCase, letters and digits) or syntax.
_IDENTIFIER = re.compile(r"\w*(?:_\w|[a-z][A-Z]|[A-Za-z]\d|[*(){}\[\]<>=;]|:/|www\.)")
# A sentence starts with a capital (after a quote or bracket), never inside a definition list
# of lower-case parameter names.
_PROSE_START = re.compile(r"[\"'\u201c\u2018(\[]?[^\W\d_a-z]")
_PROSE_END = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*$")
_LEADER = re.compile(r"(?:\.\s?){4,}")
# A document's words about its own licence: never what it is about.
_BOILERPLATE = re.compile(
    r"permission is (?:hereby )?granted|\blicen[cs](?:e|es|ed|ing)\b|copyright|copyleft"
    r"|all rights reserved|public domain|\bwarrant(?:y|ies)\b|\(c\)|\u00a9",
    re.IGNORECASE,
)
# A labelled notice ("NOTE: This option is reset when ..."): when its label opens this many
# sentences of a document, it is the document's boilerplate, never its summary.
_NOTICE = re.compile(r"^\W*(note|notes|warning|caution|important|tip|hint|remark)\b\s*[:!-]", re.I)
REPEATED_NOTICES = 3
# Two sentences that share this share of their words (numbers included, of the shorter's)
# say the same thing: said once. Sentences made on one pattern ("The tides of harbour 3 were
# measured over 5 months") differ in their numbers and names, and stay.
NEAR_DUPLICATE = 0.85
# A sentence with a shell or script mark in it ("... by the # update-mime-database
# command"), a prompt or an operator, was read out of code; "the # of" is still prose.
_CODE_MARK = re.compile(r"(?:^|\s)(?:#\s+\w+[-_/]\w|(?:\$|>>>|//)\s)|\s(?:&&|\|\|)\s")
_BRACKETS = {")": "(", "]": "[", "}": "{", "\u201d": "\u201c", "\u2019": "\u2018"}
# Sections whose sentences are all such words.
_LEGAL_HEADING = re.compile(r"licen[cs]|copyright|copying|legal|warranty|disclaimer", re.I)
# A function reference's lines: a labelled field ("Returns: ..."), or a sentence naming
# several identifiers (ASN1_SUCCESS, der_len).
_FIELD_LABEL = re.compile(r"(?:returns?|return value|parameters?|arguments?|since)\s*:", re.I)
_UNDERSCORED = re.compile(r"\b[^\W\d_]\w*_\w+")
MAX_PROSE_IDENTIFIERS = 1
# A code block that declares a function, constant or type (a signature): the paragraph after
# it describes that one declaration.
_SIGNATURE = re.compile(r"\[[A-Z][\w ]*\]\s*$|^\s*(?:[\w*]+\s+)*[\w*]+\s*\([^()]*\)?\s*[;{]?\s*$")
# A sentence that leans on the one before it ("It ...", "For example, ..."), and what its
# centrality counts for in a summary, where that sentence may not precede it.
_LEANS_BACK = re.compile(
    r"(?:it|its|this|these|that|those|they|their|he|she|such|also|but|and|or|so|then|thus"
    r"|hence|however|therefore|otherwise|instead|similarly|likewise|moreover|furthermore"
    r"|here|there|for (?:example|instance)|in (?:this|that|particular|addition)|as a result)\b",
    re.IGNORECASE,
)
LEANING_BACK = 0.5
# A chapter at least this share of whose sentences describe declarations is an API reference:
# a summary draws on it at this weight, so the chapters that explain come first.
REFERENCE_CHAPTER_SHARE = 0.25
IN_REFERENCE = 0.25
# What does not tell two sentences apart: hyphens (a line break's too) and spaces.
_NOT_SAID = re.compile(r"[\s\-\u00ad\u2010\u2011]+")
# A line that reads like a title: no sentence or code punctuation, a letter first.
_TITLE_LIKE = re.compile(r"[^\W\d_][^{}();=<>$\\|]*")
# A bullet of notes, and the citations in it ("[S3]", "[S3, S7]").
_BULLET = re.compile(r"^\s*[-*+]\s+(.*\S)\s*$")
_CITATIONS = re.compile(r"(?<!\\)\[S\d+(?:,\s*S\d+)*\]")
_MARKDOWN_ESCAPE = re.compile(r"\\(.)")


@dataclass
class _Sentence:
    text: str
    words: list[str]
    doc: int
    section: str
    order: int
    prose: bool = False
    # Describes a declaration (after a signature, up to the next heading).
    reference: bool = False
    # The index of the heading above it, -1 before the first.
    heading: int = -1
    # In a top-level section that reads as an API reference.
    in_reference: bool = False
    # Licence or copyright words: never summarised.
    boilerplate: bool = False
    score: float = 0.0
    # The id of the passage it was read from, when the call was given passages.
    passage: str = ""
    # A bullet of earlier notes, written out as it is, its citations in it.
    markdown: str = ""


@dataclass
class _Heading:
    level: int
    text: str


@dataclass
class _Document:
    name: str
    words: int = 0
    paragraphs: int = 0
    headings: list[_Heading] = field(default_factory=list)
    sentences: list[_Sentence] = field(default_factory=list)
    title_line: str = ""
    # What its tables hold: Table, or a note's bullet as written (from notes).
    tables: list[Table | str] = field(default_factory=list)
    more_tables: int = 0  # tables notes counted without listing them
    # The document's paragraphs as lists of words, for the key terms' weights.
    paragraph_words: list[list[str]] = field(default_factory=list)


def write_report(
    documents: Sequence[SourceDocument],
    instructions: str,
    *,
    purpose: str = "report",
    passages: Sequence = (),  # reports.parsers.passages.Passage: what it reads, cited
    notes: Sequence[str] = (),
    max_tokens: int | None = None,
    read_by_ocr: Sequence[tuple[str, Sequence[int]]] = (),
    title: str = "",
) -> str:
    """Write what the call is for: a Markdown analysis shaped by the instructions (of the
    passages when given, else of the notes when given, else of the documents), or a plan's
    notes on its passages ("notes"), or earlier notes combined ("combine").

    `title` (Markdown, `title_of`) heads the report when given: a plan's report from notes
    sees neither the documents nor their passages, and is titled as a one-call report is.

    Notes stop before `max_tokens`, as the notes prompt asks a model to: the plan sized
    them so that the report's call can read every part's."""
    instructions = _clean_text(instructions).strip()
    if passages:
        parsed = _parse_passages(passages)
    elif notes:
        parsed = [_parse_notes(notes)]
    else:
        parsed = [
            _parse(i, doc.name, _clean_text(doc.text).splitlines())
            for i, doc in enumerate(documents)
        ]
    sentences = [s for doc in parsed for s in doc.sentences]
    _mark_repeated_notices(sentences)
    frequencies = Counter(w for s in sentences for w in s.words if _is_term(w))
    focus = {w for w in _words(instructions) if _is_term(w)}
    _score(sentences, frequencies, focus)
    _rank_central(sentences, focus)
    tables = [table for doc in parsed for table in doc.tables]
    unlisted = max(0, len(tables) - TABLES_LISTED) + sum(doc.more_tables for doc in parsed)
    if purpose == "notes":
        return _notes_text(sentences, tables, unlisted, NOTES_PER_PART, passages, max_tokens)
    if purpose == "combine":
        return _notes_text(sentences, tables, unlisted, NOTES_COMBINED, passages, max_tokens)

    summary = _pick_summary(sentences)
    points = _pick_points(sentences, summary)
    from_notes = bool(notes) and not passages
    # Notes have no title or structure of their own: the documents' names title the report.
    titled = [_Document(name=_one_line(_clean_text(d.name))) for d in documents]
    parts = [
        f"# {title or _escape(_title(titled if from_notes else parsed))}",
        "## Summary\n\n"
        + _summary_text(summary, parsed)
        + _cut_note(documents)
        + _ocr_note(read_by_ocr),
        "## Key points\n\n" + _points_text(points, parsed),
        *(["## Tables\n\n" + _tables_text(tables, unlisted)] if tables else []),
        "## Key terms\n\n" + _terms_text(parsed),
    ]
    if not from_notes:
        parts.append("## Document structure\n\n" + _structure_text(parsed))
    if instructions:
        parts.append("## Your instructions\n\n" + _instructions_text(instructions, focus, summary))
    return "\n\n".join(parts) + "\n"


def title_of(documents: Sequence[SourceDocument], passages: Sequence = ()) -> str:
    """Return the title this report gives the documents (or the passages, when given), as
    Markdown: a small model's report is written on a skeleton that begins with it."""
    if passages:
        parsed = _parse_passages(passages)
    else:
        parsed = [
            _parse(i, doc.name, _clean_text(doc.text).splitlines())
            for i, doc in enumerate(documents)
        ]
    return _escape(_title(parsed))


def _parse_passages(passages: Sequence) -> list[_Document]:
    """Read the passages as their documents' text, each line knowing its passage's id."""
    docs = []
    for index, (name, group) in enumerate(itertools.groupby(passages, lambda p: p.document)):
        lines: list[str] = []
        ids: list[str] = []
        for passage in group:
            # A blank line between passages: no paragraph, so no sentence, spans two; a
            # table does, so that its rows are read as one table.
            piece = _clean_text(passage.text).splitlines()
            if lines and not (piece and table_facts.rows_of([lines[-1], piece[0]])):
                piece.insert(0, "")
            lines += piece
            ids += [passage.id] * len(piece)
        docs.append(_parse(index, name, lines, ids))
    return docs


def _parse_notes(notes: Sequence[str]) -> _Document:
    """Read the bullets of earlier notes as sentences, each kept as written."""
    doc = _Document(name="Notes")
    for part, text in enumerate(notes):
        # Each call's notes count as a document of their own (their place in the ranking is
        # counted within them), so that the key points take one from every part first and
        # the report covers the whole document, not its beginning.
        order = 0
        for line in _clean_text(text).splitlines():
            if not (match := _BULLET.match(line)):
                continue
            markdown = match.group(1)
            if markdown.startswith(TABLE_NOTE):
                doc.tables.append(markdown.removeprefix(TABLE_NOTE))
                continue
            if markdown.startswith(MORE_TABLES_NOTE):
                count = markdown.removeprefix(MORE_TABLES_NOTE).strip()
                doc.more_tables += int(count) if count.isdecimal() else 0
                continue
            plain = _MARKDOWN_ESCAPE.sub(r"\1", _CITATIONS.sub("", markdown)).strip()
            if words := _words(plain):
                doc.words += len(words)
                doc.paragraph_words.append(_plain_words(plain))
                doc.sentences.append(
                    _Sentence(
                        plain,
                        words,
                        part,
                        "",
                        order,
                        prose=_is_prose(plain, words),
                        markdown=markdown,
                    )
                )
                order += 1
    return doc


def _notes_text(
    sentences: list[_Sentence],
    tables: list[Table | str],
    unlisted: int,
    limit: int,
    passages: Sequence,
    max_tokens: int | None,
) -> str:
    """Return what the tables hold (and how many more there are), then the most central
    sentences as bullets, the most central first, as many as `limit` and `max_tokens`
    allow (the first one always)."""
    ranked = _distinct(_ranked([s for s in sentences if not s.boilerplate]))
    chosen = [s for s in ranked if s.prose] or [s for s in ranked if _ends(s)] or ranked
    if not chosen and not tables:
        where = f" in {passages[0].id} to {passages[-1].id}" if passages else ""
        return f"- No running sentences{where}.\n"
    table_bullets = [f"- {TABLE_NOTE}{_table(t)}" for t in tables[:TABLES_LISTED]]
    if unlisted:
        table_bullets.append(f"- {MORE_TABLES_NOTE}{unlisted}")
    bullets: list[str] = []
    used = 0
    for bullet in [*table_bullets, *(f"- {_line_start(_sentence(s))}" for s in chosen[:limit])]:
        bullet += "\n"
        used += len(tokenize(bullet))
        if bullets and max_tokens is not None and used > max_tokens:
            break
        bullets.append(bullet)
    return "".join(bullets)


# The simulated model's tokens: "".join(tokens) gives back the text exactly.
_MODEL_TOKEN = re.compile(r"\s*\S{1,4}|\s+")


def tokenize(text: str) -> list[str]:
    return _MODEL_TOKEN.findall(text)


def _clean_text(text: str) -> str:
    # Lone surrogates cannot be written as UTF-8; the report must be.
    return _SURROGATE.sub("\ufffd", text)


def _words(text: str) -> list[str]:
    return [w.lower().replace("\u2019", "'") for w in _WORD.findall(text)]


def _is_term(word: str) -> bool:
    return len(word) > 2 and word not in STOP_WORDS


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut.rstrip(" ,;:-") + "…"


def _plain(line: str) -> str:
    """Strip Markdown decoration from a line so it reads as a plain title."""
    line = _LINE_MARKER.sub("", line)
    return _unemphasised(re.sub(r"^#{1,6}\s*|\s+#+\s*$", "", line.strip()))


def _unemphasised(text: str) -> str:
    # Emphasis marks stand at a word's edge; inside one (BZ2_bzRead) they are its letters.
    return _one_line(_EMPHASIS.sub("", text))


def _escape(text: str) -> str:
    """Return document text as Markdown text inside a line (in bold, a heading, a table
    cell); where it starts a line or a list item, `_line_start` keeps it from opening a block."""
    return _INLINE_SPECIAL.sub(r"\\\1", text)


def _line_start(markdown: str) -> str:
    """Return Markdown that is to start a line, its first character kept from opening a block."""
    return _BLOCK_START.sub(lambda m: f"\\{m[1]}" if m[1] else f"{m[2]}\\{m[3]}", markdown)


def _parse(
    index: int, name: str, lines: list[str], passage_ids: list[str] | None = None
) -> _Document:
    """Read one document's lines; `passage_ids` names the passage of each line."""
    doc = _Document(name=_one_line(_clean_text(name)) or f"Document {index + 1}")
    doc.words = sum(len(_ANY_WORD.findall(line)) for line in lines)
    section = ""
    block: list[str] = []
    passage = ""  # the passage of the block's first line
    fence = ""
    code_line = ""  # the last line of the latest code block
    # In a function reference: from a signature up to the next heading.
    reference = False
    seen_text = False  # only the first line of text may be a title line

    caption = ""  # the block before, when it reads as a table's caption

    def close_block() -> None:
        nonlocal caption
        if block:
            if rows := table_facts.rows_of(block):
                doc.tables.append(Table(rows, caption, passage))
            caption = _one_line(" ".join(block)) if table_facts.is_caption(block[0]) else ""
            if any(_ANY_WORD.search(line) for line in block):
                doc.paragraphs += 1
                doc.paragraph_words.append(_plain_words(" ".join(block)))
            _add_sentences(doc, index, section, block, reference, passage)
            block.clear()

    for number, raw in enumerate(lines):
        if fence:
            if _closes(fence, raw):
                fence = ""
                reference = reference or bool(_SIGNATURE.search(code_line))
            elif raw.strip():
                code_line = raw
            continue
        if match := _FENCE.match(raw):
            close_block()
            fence = match.group(1)
            continue
        if match := _ATX.match(raw):
            close_block()
            if heading := _unemphasised(match.group(2) or ""):
                doc.headings.append(_Heading(len(match.group(1)), heading))
                section, reference = heading, False
            continue
        if block and (match := _SETEXT.match(raw)):
            heading = _unemphasised(" ".join(block))
            block.clear()
            if heading:
                doc.headings.append(_Heading(1 if match.group(1)[0] == "=" else 2, heading))
                section, reference = heading, False
            continue
        if raw.strip():
            if not seen_text and not doc.headings and _reads_like_title(raw):
                doc.title_line = _plain(raw)
            seen_text = True
            if not block and passage_ids is not None:
                passage = passage_ids[number]
            block.append(raw)
        else:
            close_block()
    close_block()
    _mark_reference_chapters(doc)
    return doc


def _mark_reference_chapters(doc: _Document) -> None:
    """Mark the sentences of each top-level section that reads as an API reference."""
    top = min((h.level for h in _sections(doc)), default=1)
    chapter_of: list[int] = []
    for i, heading in enumerate(doc.headings):
        chapter_of.append(i if heading.level <= top or not chapter_of else chapter_of[-1])
    chapters: dict[int, list[_Sentence]] = {}
    for s in doc.sentences:
        chapters.setdefault(chapter_of[s.heading] if s.heading >= 0 else -1, []).append(s)
    for sentences in chapters.values():
        described = sum(s.reference for s in sentences)
        if described >= REFERENCE_CHAPTER_SHARE * len(sentences):
            for s in sentences:
                s.in_reference = True


def _reads_like_title(line: str) -> bool:
    """Tell whether a first line reads as a title: short, not a sentence, its words
    capitalised (small words aside) or all in capitals."""
    text = _plain(line)
    words = _WORD.findall(text)
    return (
        bool(_TITLE_LIKE.fullmatch(text))
        and len(text.split()) <= TITLE_WORDS
        and not text.endswith((".", ",", ";", ":"))
        and " | " not in line
        and bool(words)
        and all(w[0].isupper() or w.lower() in STOP_WORDS for w in words)
        and words[0][0].isupper()
    )


def _humanised(name: str) -> str:
    """Return a file name as a title: no extension, words apart, the first capitalised."""
    stem = re.sub(r"\.[A-Za-z0-9]{1,5}$", "", name.strip())
    stem = re.sub(r"(?<=[^\W\d_])[-_]+(?=[^\W\d_])|_+", " ", stem).strip() or name
    return stem[:1].upper() + stem[1:]


def _plain_words(text: str) -> list[str]:
    """Return the words of `text` that are words of a language, lower-cased.

    Identifiers (asn1_create_element, CARD32, camelCase) are left out whole, not split
    into fragments.
    """
    words = []
    for token in _TOKEN.findall(text):
        token = _EDGE_PUNCTUATION.sub("", token)
        if _PLAIN_WORD.fullmatch(token) and not _CAMEL.search(token):
            words.append(token.lower().replace("\u2019", "'"))
    return words


def _closes(fence: str, line: str) -> bool:
    # Only a bare run of the same character, at least as long, closes a fence.
    stripped = line.strip(" \t")
    return len(stripped) >= len(fence) and stripped == fence[0] * len(stripped)


def _add_sentences(
    doc: _Document, index: int, section: str, block: list[str], reference: bool, passage: str
) -> None:
    """Add the block's sentences; `reference` when it describes a declaration above it."""
    legal = bool(_LEGAL_HEADING.search(section))
    # A list item is its own statement; other lines of a block wrap one paragraph.
    items: list[str] = []
    for line in block:
        stripped = _LINE_MARKER.sub("", line)
        if _LIST_ITEM.match(line) or not items:
            items.append(stripped)
        else:
            items[-1] += " " + stripped
    for item in items:
        for piece in _SENTENCE_END.split(_one_line(item)):
            if words := _words(piece):
                order = len(doc.sentences)
                boilerplate = legal or bool(_BOILERPLATE.search(piece))
                prose = not (boilerplate or reference) and _is_prose(piece, words)
                doc.sentences.append(
                    _Sentence(
                        piece,
                        words,
                        index,
                        section,
                        order,
                        prose=prose,
                        reference=reference,
                        heading=len(doc.headings) - 1,
                        boilerplate=boilerplate,
                        passage=passage,
                    )
                )


def _is_prose(text: str, words: list[str]) -> bool:
    """Tell whether a sentence reads as prose, not a contents, index or table line."""
    tokens = _TOKEN.findall(text)
    identifiers = sum(1 for token in tokens if _IDENTIFIER.match(token))
    return (
        len(_plain_words(text)) >= MIN_PROSE_WORDS
        and len(words) <= MAX_PROSE_WORDS
        and identifiers <= MAX_IDENTIFIER_SHARE * len(tokens)
        and bool(_PROSE_START.match(text))
        and bool(_PROSE_END.search(text))
        and not _LEADER.search(text)
        and " | " not in text
        and len(_plain_words(text)) >= MIN_PROSE_WORD_SHARE * len(tokens)
        and not _FIELD_LABEL.match(text)
        and len(set(_UNDERSCORED.findall(text))) <= MAX_PROSE_IDENTIFIERS
        and not _CODE_MARK.search(text)
        and _balanced(text)
    )


def _balanced(text: str) -> bool:
    """Tell whether every bracket and quote the sentence opens it also closes.

    A sentence cut out of a longer one ("...(as a NUL-terminated string.") is not whole.
    An apostrophe inside a word is no quote.
    """
    if text.count('"') % 2:
        return False
    stack: list[str] = []
    for i, ch in enumerate(text):
        if ch == "\u2019" and 0 < i < len(text) - 1 and text[i - 1].isalnum():
            continue  # an apostrophe inside a word
        if ch in "([{\u201c\u2018":
            stack.append(ch)
        elif ch in _BRACKETS and (not stack or stack.pop() != _BRACKETS[ch]):
            return False
    return not stack


def _mark_repeated_notices(sentences: list[_Sentence]) -> None:
    """Mark as boilerplate the notices whose label opens many sentences of a document."""
    labels = Counter(
        (s.doc, found[1].casefold()) for s in sentences if (found := _NOTICE.match(s.text))
    )
    for s in sentences:
        found = _NOTICE.match(s.text)
        if found and labels[s.doc, found[1].casefold()] >= REPEATED_NOTICES:
            s.boilerplate, s.prose = True, False


def _unlike(sentences: list[_Sentence], said: list[_Sentence] = ()) -> list[_Sentence]:
    """Return the sentences, in their order, without those that say what an earlier one
    (or one of `said`) says: the same words, mostly."""
    kept: list[_Sentence] = []
    seen = [set(_ANY_WORD.findall(s.text.casefold())) for s in said]
    for s in sentences:
        terms = set(_ANY_WORD.findall(s.text.casefold()))
        if any(
            terms and len(terms & other) >= NEAR_DUPLICATE * min(len(terms), len(other))
            for other in seen
        ):
            continue
        seen.append(terms)
        kept.append(s)
    return kept


def _score(sentences: list[_Sentence], frequencies: Counter[str], focus: set[str]) -> None:
    top = max(frequencies.values(), default=1)
    for s in sentences:
        terms = {w for w in s.words if _is_term(w)}
        weight = sum(frequencies[w] for w in terms) / top
        # Divide by the root of the length so long sentences do not win by size alone.
        score = weight / math.sqrt(len(s.words))
        if len(s.words) < MIN_SENTENCE_WORDS:
            score *= 0.25
        if focus:
            score *= 1 + 0.5 * len(terms & focus)
        s.score = score


def _rank_central(sentences: list[_Sentence], focus: set[str]) -> None:
    """Rescore the best prose sentences by TextRank, above every other sentence."""
    prose = [s for s in sentences if s.prose]
    candidates = sorted(prose, key=lambda s: (-s.score, s.doc, s.order))[:TEXTRANK_CANDIDATES]
    if not candidates:
        return
    terms = [{w for w in s.words if _is_term(w)} for s in candidates]
    lengths = [math.log(len(t) + 1) for t in terms]
    links: list[list[tuple[int, float]]] = [[] for _ in candidates]
    for i, j in itertools.combinations(range(len(candidates)), 2):
        if shared := len(terms[i] & terms[j]):
            weight = shared / (lengths[i] + lengths[j])
            links[i].append((j, weight))
            links[j].append((i, weight))
    totals = [sum(weight for _, weight in out) for out in links]
    rank = [1.0] * len(candidates)
    for _ in range(TEXTRANK_ROUNDS):
        rank = [
            (1 - TEXTRANK_DAMPING)
            + TEXTRANK_DAMPING * sum(rank[j] * weight / totals[j] for j, weight in links[i])
            for i in range(len(candidates))
        ]
    lengths_by_doc = Counter(s.doc for s in sentences)
    for s, value, words in zip(candidates, rank, terms, strict=True):
        # Documents state their point early; appendices (licences, references) come last.
        lead = 1.5 - s.order / max(lengths_by_doc[s.doc], 1)
        boost = 1 + 0.5 * len(words & focus)
        if _LEANS_BACK.match(s.text):
            boost *= LEANING_BACK
        if s.in_reference:
            boost *= IN_REFERENCE
        # Every candidate ranks above sentences that are not prose; the term weight breaks
        # ties.
        s.score = 1000 + value * lead * boost + s.score / 100


def _ranked(sentences: list[_Sentence]) -> list[_Sentence]:
    return sorted(sentences, key=lambda s: (-s.score, s.doc, s.order))


def _in_order(sentences: list[_Sentence]) -> list[_Sentence]:
    return sorted(sentences, key=lambda s: (s.doc, s.order))


def _pick_summary(sentences: list[_Sentence]) -> list[_Sentence]:
    # Prose first, so that no contents or index line gets in; a short text's other
    # sentences only when it has too little prose.
    sentences = [s for s in sentences if not s.boilerplate]
    count = min(5, max(3, len(sentences) // 6))
    prose = _unlike(_distinct(_ranked([s for s in sentences if s.prose])))
    if len(prose) >= count:
        return _in_order(prose[:count])
    said = {_same(s) for s in prose}
    rest = [s for s in _distinct(_ranked(sentences)) if _same(s) not in said and _ends(s)]
    return _in_order(_unlike(prose + rest)[:count])


def _ends(s: _Sentence) -> bool:
    return bool(_PROSE_END.search(s.text)) and not _LEADER.search(s.text)


def _same(s: _Sentence) -> str:
    """Return what makes two sentences the same one, said twice or hyphenated differently.

    Case, hyphens and spaces do not count: a line break can turn "enterprise-class" into
    "enterpriseclass" or "enterprise- class".
    """
    return _NOT_SAID.sub("", s.text.casefold())


def _distinct(sentences: list[_Sentence]) -> list[_Sentence]:
    # A sentence said twice (a repeated notice, a running text) is one sentence.
    first: dict[str, _Sentence] = {}
    for s in sentences:
        first.setdefault(_same(s), s)
    return list(first.values())


def _pick_points(sentences: list[_Sentence], summary: list[_Sentence]) -> list[_Sentence]:
    used = {id(s) for s in summary}
    pool = [s for s in sentences if s.prose] or [s for s in sentences if not s.boilerplate]
    said = {_same(s) for s in summary}
    rest = [s for s in _distinct(_ranked(pool)) if id(s) not in used and _same(s) not in said]
    rest = _unlike(rest, summary)
    # One point per section first, so the points cover the document, not one passage.
    chosen: list[_Sentence] = []
    seen: set[tuple[int, str]] = set()
    for s in rest:
        if (s.doc, s.section) not in seen and len(chosen) < KEY_POINTS:
            seen.add((s.doc, s.section))
            chosen.append(s)
    for s in rest:
        if len(chosen) >= KEY_POINTS:
            break
        if all(s is not c for c in chosen):
            chosen.append(s)
    return _in_order(chosen)


def _sentence(s: _Sentence) -> str:
    """Return the sentence as the report writes it, ending with its citation."""
    if s.markdown:
        return s.markdown
    text = _escape(_cut(s.text, SENTENCE_CHARS))
    return f"{text} [{s.passage}]" if s.passage else text


def _title(docs: list[_Document]) -> str:
    if not docs:
        return "Analysis report"
    if len(docs) == 1:
        doc = docs[0]
        return _cut(_doc_title(doc) or _humanised(doc.name), TITLE_CHARS)
    # Several documents: a heading names one best, else its file name (a first line
    # of plain text is usually the start of a sentence).
    names = "; ".join(_doc_title(d) if d.headings else d.name for d in docs)
    return _cut(f"Analysis of {len(docs)} documents: {names}", TITLE_CHARS)


def _doc_title(doc: _Document) -> str:
    """Return the first level-1 heading, else the first heading, else a title-like line."""
    top = next((h for h in doc.headings if h.level == 1), None)
    if top is not None:
        return top.text
    return doc.headings[0].text if doc.headings else doc.title_line


def _sections(doc: _Document) -> list[_Heading]:
    """Return the headings below the title: the document's sections."""
    title = _doc_title(doc)
    headings = list(doc.headings)
    if headings and headings[0].text == title:
        headings.pop(0)
    return headings


def _summary_text(summary: list[_Sentence], docs: list[_Document]) -> str:
    if summary:
        return _line_start(" ".join(_sentence(s) for s in summary))
    words = sum(d.words for d in docs)
    return (
        f"The {'documents contain' if len(docs) > 1 else 'document contains'} {words} "
        "words but no running sentences to summarise; the structure below lists what was found."
    )


def _cut_note(documents: Sequence[SourceDocument]) -> str:
    cuts = [doc for doc in documents if doc.full_chars is not None]
    if not cuts:
        return ""
    listed = "; ".join(
        f"**{_escape(_cut(doc.name, NAME_CHARS))}**, its first {len(doc.text):,} of "
        f"{doc.full_chars:,} characters"
        for doc in cuts
    )
    return (
        "\n\nThe input was cut to fit the model's context, so this report covers only "
        f"part of it: {listed}."
    )


def _ocr_note(read_by_ocr: Sequence[tuple[str, Sequence[int]]]) -> str:
    named = [(f"**{_escape(_cut(name, NAME_CHARS))}**", pages) for name, pages in read_by_ocr]
    note = wording.read_by_ocr(named)
    return f"\n\n{note}" if note else ""


def _points_text(points: list[_Sentence], docs: list[_Document]) -> str:
    if not points:
        return "- Nothing stands out beyond the summary above."
    lines = []
    for s in points:
        # Say where the point comes from: its section, else its document when there are several.
        where = s.section or (docs[s.doc].name if len(docs) > 1 else "")
        label = f"**{_escape(_cut(where, HEADING_CHARS))}:** " if where else ""
        lines.append(f"- {_line_start(label + _sentence(s))}")
    return "\n".join(lines)


def _terms_text(docs: list[_Document]) -> str:
    paragraphs = [words for doc in docs for words in doc.paragraph_words]
    counts: Counter[str] = Counter()
    spread: Counter[str] = Counter()
    for words in paragraphs:
        terms = [w for w in words if _is_term(w)]
        counts.update(terms)
        spread.update(set(terms))
    # TF-IDF over paragraphs: a word used often, but not in every paragraph alike, is a
    # term of this text; a word said once is not a key term.
    weights = {
        term: count * math.log(1 + len(paragraphs) / spread[term])
        for term, count in counts.items()
        if count > 1
    }
    terms = sorted(weights, key=lambda term: (-weights[term], term))[:KEY_TERMS]
    # The table reads by count; among equal counts, the weightier term first.
    terms.sort(key=lambda term: -counts[term])
    if not terms:
        return "No recurring terms stand out: the text is too short or made of common words."
    rows = [f"| {_escape(term)} | {counts[term]} |" for term in terms]
    return "\n".join(["| Term | Count |", "| --- | ---: |", *rows])


def _structure_text(docs: list[_Document]) -> str:
    if not docs:
        return "- No documents were given."
    lines = []
    for doc in docs:
        headings = _sections(doc)
        lines.append(
            f"- **{_escape(_cut(doc.name, NAME_CHARS))}**: {_count(doc.words, 'word')}, "
            f"{_count(doc.paragraphs, 'paragraph')}, "
            f"{_count(len(headings), 'heading') if headings else 'no headings'}"
        )
        lines.extend(_heading_tree(headings, max(3, MAX_HEADINGS_LISTED // len(docs))))
    return "\n".join(lines)


def _table(table: Table | str) -> str:
    """Return what a table holds, ending with its citation; a note's bullet as written."""
    if isinstance(table, str):
        return table
    text = _escape(table_facts.describe(table))
    return f"{text} [{table.passage}]" if table.passage else text


def _tables_text(tables: list[Table | str], unlisted: int) -> str:
    lines = [f"- {_line_start(_table(t))}" for t in tables[:TABLES_LISTED]]
    if unlisted:
        lines.append(f"- And {_count(unlisted, 'more table')}.")
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _heading_tree(headings: list[_Heading], limit: int) -> list[str]:
    lines = []
    top = min((h.level for h in headings), default=1)
    # Too many to list: the deepest levels go first, so the top-level sections all show.
    shown = headings
    for deepest in range(MAX_HEADING_DEPTH, top - 1, -1):
        shown = [h for h in headings if h.level <= deepest]
        if len(shown) <= limit:
            break
    hidden = len(headings) - len(shown[:limit])
    headings = shown
    depth = -1
    for h in headings[:limit]:
        # Nest at most one level deeper than the previous heading: a jump from h1 to h4
        # indented in full would turn into an indented code block.
        depth = min(h.level - top, depth + 1)
        lines.append(f"{'  ' * (depth + 1)}- {_line_start(_escape(_cut(h.text, HEADING_CHARS)))}")
    if hidden:
        lines.append(f"  - … and {hidden} more")
    return lines


def _instructions_text(instructions: str, focus: set[str], summary: list[_Sentence]) -> str:
    quoted = instructions[:INSTRUCTIONS_CHARS]
    # A fence longer than any backtick run inside keeps the instructions literal text.
    longest = max((len(run) for run in re.findall(r"`+", quoted)), default=0)
    fence = "`" * max(3, longest + 1)
    parts = [f"{fence}text\n{quoted}\n{fence}"]
    if len(instructions) > INSTRUCTIONS_CHARS:
        parts.append(f"(Shown cut to their first {INSTRUCTIONS_CHARS} characters.)")
    matched = sorted({w for s in summary for w in s.words} & focus)
    if matched:
        hits = sum(1 for s in summary if focus & set(s.words))
        parts.append(
            "How they were taken into account: sentences sharing words with the instructions "
            f"were ranked higher for the summary and the key points. {hits} of the "
            f"{len(summary)} summary sentences mention {_escape(', '.join(matched[:10]))}."
        )
    elif focus:
        parts.append(
            "How they were taken into account: sentences sharing words with the instructions "
            "would have been ranked higher, but none of their key words appear in the "
            "documents, so the summary follows the documents' own emphasis."
        )
    else:
        parts.append(
            "How they were taken into account: the instructions contain no key words to match "
            "against the documents, so the summary follows the documents' own emphasis."
        )
    return "\n\n".join(parts)
