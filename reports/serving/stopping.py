"""How a web process stops (docs/production.md): whether it is stopping, and the ASGI
middleware that stops it gracefully on SIGTERM.

A process serves until SIGTERM, then it is stopping: new WebSockets and event streams are
refused, open ones are closed so that their pages and clients reconnect (behind the
balancer, to another process) and resume after their last seq, and the server's own
SIGTERM handling follows once they are gone, or after REPORTS_DRAIN_S at most. `/readyz`
reads the state to answer "not ready"; only `StopsGracefully` sets it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading

from django.conf import settings
from django.urls import Resolver404, resolve

from reports.serving.errors import asgi_headers, json_error

log = logging.getLogger(__name__)

_stopping = False


def is_stopping() -> bool:
    """Return whether this process got SIGTERM and is closing its connections."""
    return _stopping


def long_lived(view):
    """Mark a view whose answer is a stream kept open: a stopping process ends it, and
    refuses new ones."""
    view.long_lived = True
    return view


def is_long_lived(scope) -> bool:
    """Return whether the connection of `scope` is a WebSocket or a long-lived view's."""
    if scope["type"] == "websocket":
        return True
    if scope["type"] != "http":
        return False
    path = scope["path"].removeprefix(scope.get("root_path", ""))
    try:
        view = resolve(path).func
    except Resolver404:
        return False
    return getattr(view, "long_lived", False)


class StopsGracefully:
    """Keep track of open WebSockets and event streams; on SIGTERM, close them and refuse
    new ones, then hand SIGTERM to the server (see the module's docstring)."""

    # The WebSocket close code that means "this server is stopping: reconnect now". Not the
    # standard 1012: daphne (autobahn) sends only 1000 and 3000-4999 from an application.
    RESTART = 4012

    def __init__(self, app) -> None:
        self.app = app
        self.open: dict = {}  # close() -> the task serving that connection
        self.installed = False

    async def __call__(self, scope, receive, send):
        self.install()
        if not is_long_lived(scope):
            return await self.app(scope, receive, send)
        if is_stopping():
            return await self._refuse(scope, receive, send)
        # Only an event stream waits to be told (a WebSocket hears its own close): a
        # WebSocket's page holds no event of its own (benchmark 6).
        websocket = scope["type"] == "websocket"
        closing = None if websocket else asyncio.Event()
        closed = False

        async def guarded_send(message):
            if not closed:
                await send(message)

        async def guarded_receive():
            if closing.is_set():
                return {"type": f"{scope['type']}.disconnect", "code": self.RESTART}
            received = asyncio.ensure_future(receive())
            told = asyncio.ensure_future(closing.wait())
            try:
                await asyncio.wait({received, told}, return_when=asyncio.FIRST_COMPLETED)
                if received.done():
                    return received.result()
                return {"type": f"{scope['type']}.disconnect", "code": self.RESTART}
            finally:
                # Also when the caller stops listening (Django does once its answer ends):
                # neither wait may outlive this one.
                received.cancel()
                told.cancel()

        async def close():
            nonlocal closed
            if websocket:
                message = {"type": "websocket.close", "code": self.RESTART}
            else:  # the end of the stream: the client resumes with Last-Event-ID
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            closed = True
            try:
                await send(message)
            finally:
                if closing is not None:
                    closing.set()

        self.open[close] = asyncio.current_task()
        # A WebSocket hears its own close from the server; an event stream is told here
        # (waiting for that costs two asyncio tasks a connection, so only streams do).
        receiving = receive if websocket else guarded_receive
        try:
            await self.app(scope, receiving, guarded_send)
        finally:
            self.open.pop(close, None)

    async def _refuse(self, scope, receive, send) -> None:
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            # Closed before it is accepted, a handshake is refused: the server answers HTTP
            # 403, whatever close code is given (the ASGI specification).
            await send({"type": "websocket.close"})
            return
        refusal = json_error(
            503, "draining", "This server is stopping; retry.", {"Retry-After": "1"}
        )
        await send(
            {
                "type": "http.response.start",
                "status": refusal.status_code,
                "headers": asgi_headers(refusal),
            }
        )
        await send({"type": "http.response.body", "body": refusal.content})

    def install(self) -> None:
        """Take SIGTERM over from the server, keeping its handler for after the stop."""
        if self.installed or threading.current_thread() is not threading.main_thread():
            return
        self.installed = True
        loop = asyncio.get_running_loop()
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum, frame):
            loop.call_soon_threadsafe(lambda: loop.create_task(self.stop(previous)))

        signal.signal(signal.SIGTERM, on_sigterm)

    async def stop(self, previous) -> None:
        """Close every open stream, wait for them to end, then stop as the server would."""
        global _stopping
        if _stopping:
            return
        _stopping = True
        log.warning("SIGTERM: closing %d open streams before stopping", len(self.open))
        serving = dict(self.open)
        await asyncio.gather(*(close() for close in serving), return_exceptions=True)
        if serving:
            await asyncio.wait(serving.values(), timeout=settings.REPORTS_DRAIN_S)
        signal.signal(signal.SIGTERM, previous)
        if callable(previous):
            previous(signal.SIGTERM, None)
        else:
            os.kill(os.getpid(), signal.SIGTERM)
