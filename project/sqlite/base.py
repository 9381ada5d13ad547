"""SQLite with one writer at a time per process, handed over as soon as it is done.

SQLite lets one connection write at a time. When a second one finds the database locked,
its busy handler sleeps and retries with growing pauses (1, 2, 5, 10 … 100 ms), however
soon the first one commits. In the embedded layout the web requests, the worker's own lane
and the shared database thread all write to the same file from threads of one process, so
a chunk write that arrived during a 3 ms claim slept tens of milliseconds — the largest
gaps of the fan-out benchmark (docs/benchmarks.md, "Isolation, closed").

Here the connections of a process take a lock before they write — at `BEGIN IMMEDIATE`
for a transaction (released at its commit or rollback), around the statement for a write
outside one — so a waiting writer wakes the moment the lock is free. Another process
(a management command, say) still meets SQLite's own busy handler. An in-memory database
(the test suite's) belongs to one connection's cache and keeps SQLite's behaviour.
"""

from __future__ import annotations

import threading

from django.db.backends.sqlite3 import base

_WRITE_LOCK = threading.Lock()
_READ_ONLY = ("SELECT", "PRAGMA", "EXPLAIN")


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._writing = False  # this connection holds the process's write lock
        self._cursor_factory = _cursor_factory(self)

    def take_write_lock(self) -> None:
        """Wait for the process's write lock; past SQLite's own timeout, let SQLite decide."""
        if not self._writing and not self.is_in_memory_db():
            timeout = float(self.settings_dict["OPTIONS"].get("timeout", 5))
            self._writing = _WRITE_LOCK.acquire(timeout=timeout)

    def release_write_lock(self) -> None:
        if self._writing:
            self._writing = False
            _WRITE_LOCK.release()

    def writes_alone(self, query: str) -> bool:
        """Whether `query` is a write that runs as a transaction of its own."""
        return (
            not self._writing
            and not self.in_atomic_block
            and self.get_autocommit()
            and not query.lstrip()[:7].upper().startswith(_READ_ONLY)
        )

    def locking_alone(self, query: str, call, *args):
        """Return call(*args), holding the write lock around it when `query` writes alone."""
        if not self.writes_alone(query):
            return call(*args)
        self.take_write_lock()
        try:
            return call(*args)
        finally:
            self.release_write_lock()

    def _start_transaction_under_autocommit(self) -> None:
        self.take_write_lock()
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self.release_write_lock()
            raise

    def _commit(self):
        try:
            return super()._commit()
        finally:
            self.release_write_lock()

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self.release_write_lock()

    def _close(self):
        try:
            return super()._close()
        finally:
            self.release_write_lock()

    def create_cursor(self, name=None):
        return self.connection.cursor(factory=self._cursor_factory)


def _cursor_factory(wrapper: DatabaseWrapper) -> type[base.SQLiteCursorWrapper]:
    class Cursor(base.SQLiteCursorWrapper):
        """A write outside a transaction holds the lock for its one statement."""

        def execute(self, query, params=None):
            return wrapper.locking_alone(query, super().execute, query, params)

        def executemany(self, query, param_list):
            return wrapper.locking_alone(query, super().executemany, query, param_list)

    return Cursor
