"""The WebSocket side of the site: its routes, and who may open one (docs/security.md)."""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.urls import path

from reports.streaming.consumers import TaskConsumer

websocket_urlpatterns = [
    path("ws/tasks/<str:task_id>/", TaskConsumer.as_asgi()),
]

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]


class SameOriginValidator:
    """Open a WebSocket only for a page of this very site.

    The handshake's Origin must name the same scheme, host and port as the handshake itself
    (the Host header, and TLS as seen here or through SECURE_PROXY_SSL_HEADER), or be one of
    CSRF_TRUSTED_ORIGINS; the host must be one of ALLOWED_HOSTS. Another port or scheme of
    the same host is another origin: a page served there must not read our users' streams.
    Anything else is refused at the handshake (403), before the consumer runs.
    """

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if allowed_origin(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)


def allowed_origin(scope) -> bool:
    headers = {name: value.decode("latin-1") for name, value in scope.get("headers", [])}
    origin = parse_origin(headers.get(b"origin", ""))
    if origin is None:
        return False
    if origin in {parse_origin(trusted) for trusted in settings.CSRF_TRUSTED_ORIGINS}:
        return True
    host, port = split_domain_port(headers.get(b"host", ""))
    if not host or not validate_host(host, _allowed_hosts()):
        return False
    scheme = "https" if _secure(scope, headers) else "http"
    own = (scheme, host, int(port) if port.isdigit() else DEFAULT_PORTS[scheme])
    return origin == own


def parse_origin(raw: str) -> Origin | None:
    """Return (scheme, host, port) of an http(s) origin, the port made explicit; None else."""
    try:
        parts = urlsplit(raw.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def _secure(scope, headers: dict[bytes, str]) -> bool:
    if scope.get("scheme") == "wss":
        return True
    if settings.SECURE_PROXY_SSL_HEADER:
        meta_name, value = settings.SECURE_PROXY_SSL_HEADER
        name = meta_name.removeprefix("HTTP_").replace("_", "-").lower().encode("latin-1")
        return headers.get(name, "").split(",")[0].strip() == value
    return False


def _allowed_hosts() -> list[str]:
    # As HttpRequest.get_host(): with DEBUG on and no hosts set, local names are allowed.
    if settings.DEBUG and not settings.ALLOWED_HOSTS:
        return [".localhost", "127.0.0.1", "[::1]"]
    return settings.ALLOWED_HOSTS
