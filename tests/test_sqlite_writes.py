"""One writer at a time per process on SQLite (project/sqlite): a connection that finds
another of this process writing waits for it outside SQLite, and is let in the moment it
commits, instead of entering SQLite's busy handler, which sleeps in growing steps."""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections, transaction

from project.sqlite import base

pytestmark = pytest.mark.skipif(
    connections["default"].vendor != "sqlite", reason="SQLite's own writer lock"
)


class WatchedLock:
    """The process's write lock, telling when a second writer found it taken."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.contended = threading.Event()

    def acquire(self, timeout: float = -1) -> bool:
        if not self.lock.acquire(blocking=False):
            self.contended.set()
            return self.lock.acquire(timeout=timeout)
        return True

    def release(self) -> None:
        self.lock.release()


@contextlib.contextmanager
def connected(path):
    """A connection of this thread's own to the database at `path`, as alias "writes"."""
    settings = copy.deepcopy(connections["default"].settings_dict)
    settings["NAME"] = str(path)
    connections["writes"] = db = base.DatabaseWrapper(settings, alias="writes")
    try:
        db.ensure_connection()
        yield db
    finally:
        db.close()
        del connections["writes"]


def either(*events: threading.Event, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(event.is_set() for event in events):
            return True
        time.sleep(0.001)
    return False


@pytest.fixture
def own_database(django_db_blocker):
    """Database access for a database of the test's own, not the suite's."""
    with django_db_blocker.unblock():
        yield


@pytest.mark.parametrize("in_a_transaction", [False, True], ids=["statement", "transaction"])
def test_a_second_writer_waits_for_the_first_outside_sqlite(
    tmp_path, monkeypatch, own_database, in_a_transaction
):
    lock = WatchedLock()
    monkeypatch.setattr(base, "_WRITE_LOCK", lock)
    path = tmp_path / "db.sqlite3"
    with connected(path) as db, db.cursor() as cursor:
        cursor.execute("CREATE TABLE counter (n INTEGER)")
        cursor.execute("INSERT INTO counter VALUES (0)")

    order: list[str] = []
    first_writing, second_in_sqlite = threading.Event(), threading.Event()

    def first() -> None:
        with connected(path) as db, transaction.atomic(using="writes"):
            db.cursor().execute("UPDATE counter SET n = n + 1")
            first_writing.set()
            # Hold the write until the second writer waits: on the lock, or inside SQLite.
            assert either(lock.contended, second_in_sqlite, timeout_s=10)
            order.append("first committed")

    def second() -> None:
        with connected(path) as db:

            def traced(statement: str) -> None:
                if statement.startswith(("UPDATE", "BEGIN")):
                    order.append(f"second in SQLite: {statement.split()[0]}")
                    second_in_sqlite.set()

            db.connection.set_trace_callback(traced)
            assert first_writing.wait(10)
            with (
                transaction.atomic(using="writes") if in_a_transaction else contextlib.nullcontext()
            ):
                db.cursor().execute("UPDATE counter SET n = n + 10")

    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(first), pool.submit(second)]:
            future.result(timeout=30)

    assert order[0] == "first committed", order
    with connected(path) as db, db.cursor() as cursor:
        cursor.execute("SELECT n FROM counter")
        assert cursor.fetchone() == (11,)  # both writes, none lost
