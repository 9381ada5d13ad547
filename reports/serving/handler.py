"""Django's ASGI handler, with one trip to a thread for a request to a synchronous view,
on a thread kept from one request to the next.

Under ASGI, Django runs its middleware in async mode: each hook of each middleware (a
dozen of them) that is synchronous is its own trip from the event loop to the request's
thread and back, and while the loop serves the streams every trip waits for it. A
reloaded task page waited about 15 ms of its 40 on the server that way (benchmark 5).
Every page, form and API call has a synchronous view: for those, the middleware and the
view run in sync mode, in one trip. An asynchronous view (the event stream, the health
checks) keeps Django's async chain, so it never holds a thread while it waits.

Django also gives every request a thread of its own, started for it and joined after it
(asgiref's `ThreadSensitiveContext`), and with it a new database connection: on SQLite
about 3 ms a request, to connect and set the connection up. Here a request takes a
thread a finished request gave back (`RequestThreads`), with its connection still open
(SQLite's connections are kept, `project/settings.py`); a request finds none idle only
when more run at once than have run so far.

A request that creates a task first waits its turn at the process's admission gate
(`reports/serving/admissions.py`), before it takes a database connection.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, iscoroutinefunction, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.urls import Resolver404, resolve

from reports.serving import admissions

IDLE_REQUEST_THREADS = 8  # kept for the next requests; a burst beyond it starts more


class RequestThread(ThreadPoolExecutor):
    """One thread for one request at a time, which knows whether a call is still on it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="reportline-request")
        self._lock = threading.Lock()
        self._calls = 0

    def submit(self, fn, /, *args, **kwargs):
        with self._lock:
            self._calls += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._returned)
        return future

    def _returned(self, _) -> None:
        with self._lock:
            self._calls -= 1

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._calls > 0


class RequestThreads:
    """Threads for requests, one request at a time each, kept once their request ends.

    Each is a one-thread executor, as asgiref wants for a thread-sensitive context. Only
    the event loop's thread takes and gives back, so no lock.
    """

    def __init__(self, idle_max: int = IDLE_REQUEST_THREADS) -> None:
        self.idle: list[RequestThread] = []
        self.idle_max = idle_max

    def take(self) -> RequestThread:
        # The most recently used first: its connection is the most likely to be open.
        if self.idle:
            return self.idle.pop()
        return RequestThread()

    def give_back(self, executor: RequestThread) -> None:
        # A request whose client left may still run its view there: the next request
        # must not wait behind it, so that thread is not kept.
        if not executor.busy and len(self.idle) < self.idle_max:
            self.idle.append(executor)
        else:
            executor.shutdown(wait=False)  # it ends once its last call returns


class Handler(ASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        self.in_one_trip = BaseHandler()
        self.in_one_trip.load_middleware(is_async=False)
        self.threads = RequestThreads()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)  # Django refuses it
        executor = self.threads.take()
        try:
            # Every thread-sensitive call of the request (its signals, the view, closing
            # the response) runs on this thread, as on the one Django would start.
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self.threads.give_back(executor)

    async def get_response_async(self, request):
        view = view_of(request.path_info)
        async with admissions.gate(request.method, view):
            if is_async(view):
                return await super().get_response_async(request)
            get_response = sync_to_async(self.in_one_trip.get_response, thread_sensitive=True)
            return await get_response(request)


def view_of(path: str):
    """Return the view that serves `path`, or None for a missing one."""
    try:
        return resolve(path).func
    except Resolver404:
        return None


def is_async(view) -> bool:
    """Return whether `view` is asynchronous (None, no view, is not)."""
    return bool(getattr(view, "view_is_async", False)) or iscoroutinefunction(view)
