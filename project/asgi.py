"""The ASGI application: HTTP through Django, WebSockets through Channels.

The event loop's watchdog (reports.observability.loop_lag) and the embedded worker
start here, on the server's own event loop: not from
AppConfig.ready(), which also runs in the autoreloader's parent. Under daphne (and so
`manage.py runserver`) it starts as soon as the server runs, so queued tasks resume
after a restart without waiting for a visitor; under any other ASGI server, at the
first connection.

SIGTERM drains the process before the server stops it (docs/production.md): new
WebSockets and event streams are refused, open ones are closed so that their pages and
clients reconnect (behind the balancer, to another process) and resume after their last
seq, and the server's own SIGTERM handling follows once they are gone, or after
REPORTS_DRAIN_S at most. The handler is installed when daphne starts, and at the first
connection under any other server (uvicorn): before that there is nothing to drain.
"""

import asyncio
import json
import logging
import os
import signal
import sys
import threading

from django.core.asgi import get_asgi_application

log = logging.getLogger("reports.drain")

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs Django set up
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from reports import health  # noqa: E402
from reports.observability import loop_lag  # noqa: E402
from reports.routing import SameOriginValidator, websocket_urlpatterns  # noqa: E402
from reports.worker import supervisor  # noqa: E402


def start_on_loop() -> None:
    """Watch the server's event loop, and start the embedded worker (when enabled)."""
    loop_lag.watch_running_loop()
    supervisor.start_embedded()


class StartsEmbeddedWorker:
    """Start the loop's watchdog and the embedded worker before serving the first connection."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        start_on_loop()
        return await self.app(scope, receive, send)


class Drains:
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
        long_lived = scope["type"] == "websocket" or (
            scope["type"] == "http" and scope["path"].endswith("/events")
        )
        if not long_lived:
            return await self.app(scope, receive, send)
        if health.is_draining():
            return await self._refuse(scope, receive, send)
        closing = asyncio.Event()
        closed = False

        async def guarded_send(message):
            if not closed:
                await send(message)

        async def guarded_receive():
            if closing.is_set():
                return {"type": f"{scope['type']}.disconnect", "code": self.RESTART}
            received = asyncio.ensure_future(receive())
            told = asyncio.ensure_future(closing.wait())
            await asyncio.wait({received, told}, return_when=asyncio.FIRST_COMPLETED)
            if received.done():
                told.cancel()
                return received.result()
            received.cancel()
            return {"type": f"{scope['type']}.disconnect", "code": self.RESTART}

        async def close():
            nonlocal closed
            if scope["type"] == "websocket":
                message = {"type": "websocket.close", "code": self.RESTART}
            else:  # the end of the stream: the client resumes with Last-Event-ID
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            closed = True
            try:
                await send(message)
            finally:
                closing.set()

        self.open[close] = asyncio.current_task()
        # A WebSocket hears its own close from the server; an event stream is told here
        # (waiting for that costs two asyncio tasks a connection, so only streams do).
        receiving = receive if scope["type"] == "websocket" else guarded_receive
        try:
            await self.app(scope, receiving, guarded_send)
        finally:
            self.open.pop(close, None)

    async def _refuse(self, scope, receive, send) -> None:
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1013})  # try again later
            return
        body = json.dumps(
            {"error": {"code": "draining", "message": "This server is stopping; retry."}}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def install(self) -> None:
        """Take SIGTERM over from the server, keeping its handler for after the drain."""
        if self.installed or threading.current_thread() is not threading.main_thread():
            return
        self.installed = True
        loop = asyncio.get_running_loop()
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum, frame):
            loop.call_soon_threadsafe(lambda: loop.create_task(self.drain(previous)))

        signal.signal(signal.SIGTERM, on_sigterm)

    async def drain(self, previous) -> None:
        if health.is_draining():
            return
        health.start_draining()
        log.warning("SIGTERM: draining %d open streams before stopping", len(self.open))
        serving = dict(self.open)
        await asyncio.gather(*(close() for close in serving), return_exceptions=True)
        if serving:
            await asyncio.wait(serving.values(), timeout=settings.REPORTS_DRAIN_S)
        signal.signal(signal.SIGTERM, previous)
        if callable(previous):
            previous(signal.SIGTERM, None)
        else:
            os.kill(os.getpid(), signal.SIGTERM)


application = Drains(
    StartsEmbeddedWorker(
        ProtocolTypeRouter(
            {
                "http": django_asgi_app,
                "websocket": SameOriginValidator(
                    AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
                ),
            }
        )
    )
)


def _start_with_daphne() -> None:
    if "daphne.server" in sys.modules:
        from twisted.internet import reactor

        def started() -> None:
            start_on_loop()
            application.install()

        # callLater: run inside the asyncio loop, once it is running.
        reactor.callWhenRunning(lambda: reactor.callLater(0, started))


_start_with_daphne()
