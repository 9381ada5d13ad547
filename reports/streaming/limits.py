"""A cap on one user's open streams, SSE and WebSocket together (docs/settings.md).

Counted in this process: every stream of a process lives on its one event loop, so the
count needs no lock and no query. A user over `REPORTS_MAX_STREAMS_PER_USER` is refused
a new stream (SSE: 429; WebSocket: the handshake), so no one user can take the streams,
the memory or the connections of a process from everyone else.
"""

from __future__ import annotations

from collections import Counter

from django.conf import settings

_open: Counter = Counter()


class StreamSlot:
    """One open stream of a user; `release` it when the stream ends (again is harmless)."""

    def __init__(self, user_id) -> None:
        self.user_id = user_id
        self.held = True

    def release(self) -> None:
        if self.held:
            self.held = False
            _open[self.user_id] -= 1
            if _open[self.user_id] <= 0:
                del _open[self.user_id]


def take_slot(user) -> StreamSlot | None:
    """Return a slot for one more stream of `user`, or None when the user is at the cap."""
    if _open[user.pk] >= settings.REPORTS_MAX_STREAMS_PER_USER:
        return None
    _open[user.pk] += 1
    return StreamSlot(user.pk)
