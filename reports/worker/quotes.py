"""Citations for the sentences a report copies from its passages (`REPORTS_CITE_QUOTES`).

A small model (the `local` provider's SmolLM2) cites nothing, though it often copies a
sentence of the documents nearly word for word. At finalization, before the citations are
settled (`reports.validation.settle_citations`, which lists them under `## Sources`), such
a sentence gets its passage's citation after it, where a model puts one ("… a turbine.
[S1]"), so that a reader can check it. A citation added here means: the sentence's words
are that passage's.

What is read. Prose only: the sentences of paragraphs and list items (in block quotes too)
as the page renders them (markdown-it, tables on). Headings, code, tables and a `## Sources`
section are left alone, and so is a sentence that already holds a citation mark, well
formed or not; a mark right after a sentence's end is that sentence's. A sentence ends at
`.`, `!` or `?` (with any closing quotes, brackets or emphasis) before a space, outside
code spans, or at its paragraph's end. The Markdown is otherwise left byte for byte
(but its line ends, which settling makes `\\n` anyway).

The rule. Words are compared normalized: NFKC, casefolded, and cut at every character
that is neither a letter nor a digit, so case, punctuation and markup do not count. A
sentence quotes a passage when

* it has at least `MIN_WORDS` (6) words: fewer say too little to tell a quote from a
  common phrase;
* all its words but a lead of at most a fifth of them stand in the passage in one run,
  word for word, up to the sentence's last word;
* that lead holds no figure (no digit).

A lead is where a writer puts a connective: "However,", or "In short,", which the
`local` provider's skeleton writes before the model's Summary. So the rule need not know
those words: after "In short,", a copied sentence of 8 words or more (10 with the lead)
is cited. The rest is one run to the end because a sentence that changes or adds a word
after its lead says something the passage does not: "… for 24 hours …" where the passage
says "eight hours" is not cited, wherever the figure stands, and nor is a copied sentence
with a clause of the model's own at its end. What the rule lets through is a word changed
inside the lead that is not a figure in digits ("Nine turbines …" for "Eight turbines
…"). Preferred to the share of the sentence's word trigrams the passage holds (≥ 0.8),
which turns away "In short," before a sentence of fewer than 12 words and lets a word
changed at either end of a long one through; and to the longest run anywhere in the
sentence, which lets a change in its last fifth through. A language written without
spaces makes few "words" of a sentence and is seldom cited. When several passages hold a
run, the longest run (the shortest lead) wins, and among equals the first passage.

The cost. Each passage is read once a report: its words, and which of the trigrams (three
words in a row) of the sentences' shortest runs it holds. A sentence is then compared only
with the passages holding every trigram of its shortest run, by a substring search of its
words in theirs; a sentence the report repeats is looked up once. A report of 100 KB over
2,000 passages of 1,500 characters takes about 0.3 s on two cores, a third of it reading
the passages' words; it runs in the blocking pool, at finalization.
"""

from __future__ import annotations

import bisect
import itertools
import re
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from markdown_it.token import Token

from reports.parsers import markdown_depth
from reports.validation import CITATION_LIKE, code_spans, sources_lines

MIN_WORDS = 6
LEAD_SHARE = 5  # a lead is at most a fifth of the sentence's words

# As the page renders the report (reports/rendering.py): a table is a table, not a paragraph.
_md = markdown_depth.parser("commonmark", {"html": False}).enable("table")
_WORD = re.compile(r"[^\W_]+")
# Its mark, then any closing quotes, brackets or emphasis, then a space or the end.
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)\]*_]*(?=\s|$)")
_SPACE = re.compile(r"\s*")

type _Trigram = tuple[str, str, str]


@dataclass(frozen=True)
class _Sentence:
    line: int  # the report's line its end is on
    column: int  # where on that line its citation goes
    words: list[str]


def cite_quotes(report: str, passages: Sequence) -> tuple[str, int]:
    """Return the report with a citation after each sentence that quotes one of `passages`
    (reports.parsers.passages.Passage objects or rows with the same fields), and how many
    it added. A report with none to add is returned as it is."""
    lines = report.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    sentences = list(_uncited_sentences(_md.parse("\n".join(lines)), lines))
    quoted = _quoted_passages([s.words for s in sentences], passages)
    cited = [(s, number) for s, number in zip(sentences, quoted, strict=True) if number is not None]
    # From the report's end, so that a citation added leaves the places before it.
    for sentence, number in sorted(cited, key=lambda c: (c[0].line, c[0].column), reverse=True):
        line = lines[sentence.line]
        lines[sentence.line] = f"{line[: sentence.column]} [S{number}]{line[sentence.column :]}"
    return ("\n".join(lines), len(cited)) if cited else (report, 0)


def _uncited_sentences(tokens: list[Token], lines: list[str]) -> Iterator[_Sentence]:
    """Yield the sentences of the report's paragraphs that cite nothing and have words
    enough, outside a `## Sources` section."""
    sources = sources_lines(tokens, len(lines))
    for opening, inline in itertools.pairwise(tokens):
        if opening.type != "paragraph_open" or not inline.map or inline.map[0] in sources:
            continue
        starts = _line_starts(inline, lines)
        if starts is None:
            continue
        offsets = [offset for offset, _, _ in starts]
        for start, end in _sentence_spans(inline.content):
            sentence = inline.content[start:end]
            words = _words(sentence)
            if len(words) < MIN_WORDS or CITATION_LIKE.search(sentence):
                continue
            offset, line, column = starts[bisect.bisect_right(offsets, end - 1) - 1]
            yield _Sentence(line, column + end - offset, words)


def _line_starts(inline: Token, lines: list[str]) -> list[tuple[int, int, int]] | None:
    """Return where each line of a paragraph's text starts: its offset in the text, its
    line in the report and its column there (after any list or quote marker). None when
    a line is not found as it was written (tabs markdown-it turned into spaces): that
    paragraph is left alone."""
    start, end = inline.map or (0, 0)
    pieces = inline.content.split("\n")
    if len(pieces) != end - start:
        return None
    starts = []
    offset = 0
    for number, piece in zip(range(start, end), pieces, strict=True):
        line = lines[number]
        column = line.rfind(piece)
        if column < 0 or line[column + len(piece) :].strip():
            return None
        starts.append((offset, number, column))
        offset += len(piece) + 1
    return starts


def _sentence_spans(text: str) -> Iterator[tuple[int, int]]:
    """Yield (start, end) of each sentence of a paragraph's text, a citation mark right
    after its end included."""
    spans = code_spans(text)
    span_starts = [start for start, _ in spans]
    start = 0
    for match in _SENTENCE_END.finditer(text):
        within = bisect.bisect_right(span_starts, match.start()) - 1
        if match.end() <= start or (within >= 0 and match.start() < spans[within][1]):
            continue
        end = match.end()
        while mark := CITATION_LIKE.match(text, _SPACE.match(text, end).end()):
            end = mark.end()
        yield start, end
        start = end
    if text[start:].strip():
        yield start, len(text.rstrip())


def _words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _shortest_run(words: list[str]) -> list[str]:
    """Return the words a sentence's run must hold at least: all but its longest lead."""
    lead = len(words) // LEAD_SHARE
    figure = next((i for i, word in enumerate(words[:lead]) if any(map(str.isdigit, word))), lead)
    return words[figure:]


def _trigrams(words: list[str]) -> Iterator[_Trigram]:
    return zip(words, words[1:], words[2:], strict=False)


def _quoted_passages(sentences: list[list[str]], passages: Sequence) -> list[int | None]:
    """Return the number of the passage each sentence quotes, or None."""
    runs = [_shortest_run(words) for words in sentences]
    # A trigram the shortest runs need → the passages holding it, in their order.
    holding: dict[_Trigram, list[int]] = {t: [] for run in runs for t in _trigrams(run)}
    if not holding:
        return [None] * len(sentences)
    texts: dict[int, str] = {}  # a passage's words, space-separated, a space either side
    for passage in passages:
        words = _words(passage.text)
        found = holding.keys() & _trigrams(words)
        if found:
            texts[passage.number] = f" {' '.join(words)} "
            for trigram in found:
                holding[trigram].append(passage.number)
    quoted: dict[tuple[str, ...], int | None] = {}  # a sentence the report repeats is read once
    for words, run in zip(sentences, runs, strict=True):
        if tuple(words) not in quoted:
            quoted[tuple(words)] = _quoted(words, run, texts, holding)
    return [quoted[tuple(words)] for words in sentences]


def _quoted(
    words: list[str], run: list[str], texts: dict[int, str], holding: dict[_Trigram, list[int]]
) -> int | None:
    """Return the first passage holding the longest run of `words` to their end that is
    at least `run`, or None."""
    # Only a passage holding every trigram of the shortest run can hold a run.
    smallest, *others = sorted((holding[t] for t in _trigrams(run)), key=len)
    candidates = sorted(set(smallest).intersection(*others))
    for lead in range(len(words) - len(run) + 1):
        needle = f" {' '.join(words[lead:])} "
        for number in candidates:
            if needle in texts[number]:
                return number
    return None
