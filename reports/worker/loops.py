"""Whether a model's stream has fallen into a loop, checked as the text arrives.

A small model left alone repeats itself: the same line, tag or sentence over and over
until the output cap. `LoopCheck` is fed the text piece by piece (`feed`) and says when
the stream keeps repeating itself with nothing new. No clock, no I/O: the attempt core
(`reports.worker.attempt_core`) feeds it each chunk as it is written, and ends the call
`degenerate_output`.

The text is cut into tokens — a word or number, or a run of one punctuation mark, at most
`MAX_TOKEN_CHARS` long — the same way however the stream splits it. Each token closes an
n-gram: the last `NGRAM` tokens. Within the last `WINDOW` tokens, the stream loops when
the last `QUIET` n-grams were all seen before in the window (nothing new) and the latest
has come back at least `REPEATS` times. Telling a loop from a report's own repetition
rests on the n-gram's length and the run of nothing new: a Markdown table repeats its
cells, and a report quotes a sentence twice, but each row or paragraph brings something
new long before `QUIET` tokens pass. The measured false-positive rate is in
docs/providers-tested.md.

Each token costs a fixed amount of work (a hash, a counter, a deque), so the whole check
is linear in the text and constant per character.
"""

from __future__ import annotations

import re
from collections import Counter, deque

NGRAM = 8  # tokens in the n-gram compared
WINDOW = 600  # tokens looked back over: "the last few hundred"
QUIET = 150  # n-grams in a row with nothing new
REPEATS = 3  # the latest n-gram seen this often in the window
MAX_TOKEN_CHARS = 32  # a longer word or run is cut into tokens this long

# A word or number, or a run of one punctuation mark (a table's `|---|` is three tokens,
# not five): whitespace only separates.
_TOKEN = re.compile(r"\w+|([^\w\s])\1*")


class LoopCheck:
    """Fed a stream's text piece by piece, says once it keeps repeating itself."""

    def __init__(self) -> None:
        self._carry = ""  # a token that may go on in the next piece
        self._last: deque[str] = deque(maxlen=NGRAM)  # the latest tokens
        self._window: deque[int] = deque()  # the n-grams of the window, oldest first
        self._seen: Counter[int] = Counter()  # how often each is in the window
        self._quiet = 0  # n-grams in a row already in the window
        self.tokens = 0  # tokens taken in so far
        self.looping = False

    def feed(self, text: str) -> bool:
        """Take the next piece of the stream in; return whether the stream loops."""
        if self.looping or not text:
            return self.looping
        buffer = self._carry + text
        self._carry = ""
        for match in _TOKEN.finditer(buffer):
            token = match[0]
            last = match.end() == len(buffer)  # it may go on in the next piece: carry its tail
            whole = (len(token) - 1) // MAX_TOKEN_CHARS * MAX_TOKEN_CHARS if last else len(token)
            for start in range(0, whole, MAX_TOKEN_CHARS):
                self._take(token[start : start + MAX_TOKEN_CHARS])
            if self.looping:
                break
            if last:
                self._carry = token[whole:]
        return self.looping

    def _take(self, token: str) -> None:
        self.tokens += 1
        self._last.append(token)
        if len(self._last) < NGRAM:
            return
        gram = hash(tuple(self._last))
        self._quiet = self._quiet + 1 if gram in self._seen else 0
        self._seen[gram] += 1
        self._window.append(gram)
        if len(self._window) > WINDOW:
            oldest = self._window.popleft()
            self._seen[oldest] -= 1
            if not self._seen[oldest]:
                del self._seen[oldest]
        if self._quiet >= QUIET and self._seen[gram] >= REPEATS:
            self.looping = True
