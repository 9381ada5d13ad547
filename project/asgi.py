"""The ASGI application: HTTP through Django, WebSockets through Channels.

The embedded worker starts here, on the server's own event loop: not from
AppConfig.ready(), which also runs in the autoreloader's parent. Under daphne (and so
`manage.py runserver`) it starts as soon as the server runs, so queued tasks resume
after a restart without waiting for a visitor; under any other ASGI server, at the
first connection.
"""

import os
import sys

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs Django set up
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from reports.routing import SameOriginValidator, websocket_urlpatterns  # noqa: E402
from reports.worker import supervisor  # noqa: E402


class StartsEmbeddedWorker:
    """Start the embedded worker (when enabled) before serving the first connection."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        supervisor.start_embedded()
        return await self.app(scope, receive, send)


def _start_with_daphne() -> None:
    if "daphne.server" in sys.modules:
        from twisted.internet import reactor

        # callLater: run inside the asyncio loop, once it is running.
        reactor.callWhenRunning(lambda: reactor.callLater(0, supervisor.start_embedded))


_start_with_daphne()

application = StartsEmbeddedWorker(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)
