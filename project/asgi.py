"""The ASGI application: HTTP through Django, WebSockets through Channels.

The embedded worker starts here, on the server's own event loop, at the first
connection: not from AppConfig.ready(), which also runs in the autoreloader's parent.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs Django set up
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from reports import worker  # noqa: E402
from reports.routing import websocket_urlpatterns  # noqa: E402


class StartsEmbeddedWorker:
    """Start the embedded worker (when enabled) before serving the first connection."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        worker.start_embedded()
        return await self.app(scope, receive, send)


application = StartsEmbeddedWorker(
    ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            "websocket": AllowedHostsOriginValidator(
                AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
            ),
        }
    )
)
