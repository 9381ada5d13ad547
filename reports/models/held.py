"""A read that many callers in one process make alike, answered from its last result for a
moment.

A queued page's status line is sent again whenever its place in line moves (at most every
2 s a page), and besides the task it reads what every queued page of its lane reads
alike: the provider's circuit, the wait the lane's recent reports suggest, whether the
owner's running reports hold it behind others'. With 800 pages waiting, each move of the
queue asked the database the same questions 800 times. `Held` asks once and gives the
answer to every caller with the same arguments for `for_s` seconds.

Only for lines that are allowed to be that old: a held answer is never written anywhere,
and a page's own first line and its status events read afresh.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable

MOST = 1024  # answers kept at once; past it, the expired ones go


class Held[T]:
    """`read(*args)`, answered from its last result for the same arguments for `for_s`
    seconds; `key(*args)`, when given, says which arguments are the same.

    Callers on several threads may read the same key at once when it has expired; both
    answers are right, and the later one is kept.
    """

    def __init__(
        self,
        read: Callable[..., T],
        *,
        for_s: float,
        key: Callable[..., Hashable] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self.for_s = for_s
        self._key = key
        self._clock = clock
        self._answers: dict[Hashable, tuple[float, T]] = {}
        self._lock = threading.Lock()

    def __call__(self, *args: Hashable) -> T:
        now = self._clock()
        key = args if self._key is None else self._key(*args)
        found = self._answers.get(key)
        if found is not None and now < found[0]:
            return found[1]
        answer = self._read(*args)
        with self._lock:
            if len(self._answers) >= MOST:
                self._answers = {k: v for k, v in self._answers.items() if now < v[0]}
            self._answers[key] = (now + self.for_s, answer)
        return answer

    def __len__(self) -> int:
        """The answers held now, expired ones included until the store fills."""
        return len(self._answers)

    def forget(self) -> None:
        """Drop every held answer: the next call of each key reads."""
        with self._lock:
            self._answers = {}
