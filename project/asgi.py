"""The ASGI application: HTTP through Django, WebSockets through Channels.

The event loop's watchdog (reports.observability.loop_lag) and the embedded worker
start here, on the server's own event loop: not from
AppConfig.ready(), which also runs in the autoreloader's parent. Under daphne (and so
`manage.py runserver`) it starts as soon as the server runs, so queued tasks resume
after a restart without waiting for a visitor; under any other ASGI server, at the
first connection.

On SIGTERM the process stops gracefully (reports.serving.stopping): its open streams are
closed so that their clients resume on another process. The handler is installed when
daphne starts, and at the first connection under any other server (uvicorn): before that
there is nothing to close.
"""

import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does


def refuse_to_start_misconfigured() -> None:
    """Run the project's own system checks (reports/checks.py: settings only, no database),
    which `manage.py runserver` and the worker run before serving: an ASGI server (uvicorn,
    daphne without runserver) runs none, so a model with no price (reports.E002) started a
    web process whose every upload answered 500."""
    import logging

    from django.conf import settings
    from django.core import checks
    from django.core.exceptions import ImproperlyConfigured

    found = checks.run_checks(tags=["reports"])
    errors = [e for e in found if e.is_serious() and not e.is_silenced()]
    if errors:
        raise ImproperlyConfigured("; ".join(str(error) for error in errors))
    if settings.DEBUG:
        also = [] if settings.HTTPS else ["HTTPS is off"]
        if settings.REPORTS_ALLOW_SCENARIOS:
            also.append("the misbehaving scenarios are allowed")
        logging.getLogger("reports.serving").warning(
            "DJANGO_DEBUG is on, never in production: visitors see the tracebacks of errors"
            + "".join(f"; {what}" for what in also)
        )


refuse_to_start_misconfigured()

from reports.serving.handler import Handler  # noqa: E402 - needs Django set up

django_asgi_app = Handler()

from channels.routing import ProtocolTypeRouter  # noqa: E402 - needs Django set up

from reports.observability import loop_lag  # noqa: E402
from reports.routing import SameOriginValidator, TaskSockets  # noqa: E402
from reports.serving.stopping import StopsGracefully  # noqa: E402
from reports.streaming import follower  # noqa: E402
from reports.worker import supervisor  # noqa: E402

# Built now, not by the first page's stream: over Redis, building the channel layer imports
# its client, some 0.1 s of CPU on the way of that page's first text.
follower.layer_across_processes()


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


application = StopsGracefully(
    StartsEmbeddedWorker(
        ProtocolTypeRouter(
            {
                "http": django_asgi_app,
                "websocket": SameOriginValidator(TaskSockets()),
            }
        )
    )
)


def _start_with_daphne() -> None:
    if "daphne.server" in sys.modules:
        from http import HTTPStatus

        from twisted.internet import reactor
        from twisted.web import http

        # Twisted's reason phrases stop short of codes the site answers (422, 429): daphne
        # sent "429 Unknown Status".
        for status in HTTPStatus:
            http.RESPONSES.setdefault(status.value, status.phrase.encode())

        def started() -> None:
            start_on_loop()
            application.install()

        # callLater: run inside the asyncio loop, once it is running.
        reactor.callWhenRunning(lambda: reactor.callLater(0, started))


_start_with_daphne()

# Last: everything the process serves with is loaded now (reports/serving/heap.py).
from reports.serving.heap import freeze_startup_objects  # noqa: E402

freeze_startup_objects()
