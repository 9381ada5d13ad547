"""How many requests that create a task a process runs at once.

Task creation takes one lock for the whole site (`reports.submissions`, the admission
lock), and a request holds one of its process's pooled database connections while it
waits there. Unbounded, a burst of uploads in one process takes every connection of its
pool, and that process's pages and WebSocket handshakes wait for one, or answer 503,
until the burst is through. So the handler lets `REPORTS_ADMISSIONS_AT_ONCE` of them in
at a time (half the pool by default); the others wait, their bodies already read, before
they touch the database: a slow client holds no place, a waiting upload no connection.
"""

from __future__ import annotations

import asyncio
import weakref
from contextlib import AbstractAsyncContextManager, nullcontext

from django.conf import settings

_gates: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> semaphore


def admits_tasks(view):
    """Mark a view whose POST creates a task (outermost decorator: the URL resolves to it)."""
    view.admits_tasks = True
    return view


def gate(method: str, view) -> AbstractAsyncContextManager:
    """Return what a request must hold while it runs: the process's admission gate for a
    POST to a view that creates a task, nothing for any other request."""
    if method != "POST" or not getattr(view, "admits_tasks", False):
        return nullcontext()
    loop = asyncio.get_running_loop()
    semaphore = _gates.get(loop)
    if semaphore is None:
        semaphore = _gates[loop] = asyncio.Semaphore(settings.REPORTS_ADMISSIONS_AT_ONCE)
    return semaphore
