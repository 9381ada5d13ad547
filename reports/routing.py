"""The WebSocket side of the site: its route, and who may open one (docs/security.md)."""

from __future__ import annotations

import re
from importlib import import_module
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.models import AnonymousUser
from django.http.cookie import parse_cookie
from django.http.request import split_domain_port, validate_host

from reports import threads
from reports.streaming.consumers import TaskConsumer
from reports.streaming.credentials import session_hash_holds

TASK_SOCKET = re.compile(r"/ws/tasks/(?P<task_id>[^/]+)/")


class TaskSockets:
    """The one WebSocket route, `/ws/tasks/<task_id>/`, with the user of its session.

    What Channels' `AuthMiddlewareStack(URLRouter(...))` does, lighter for a page that
    stays open for hours: those layers each keep a copy of the scope, a lazy session and
    a lazy user for as long as the socket lives (about a fifth of an idle page's memory,
    benchmark 6). Here the session is read once, at the handshake, and the consumer gets
    one scope: the server's, with `user` and `url_route` added (it drops the user once
    it has checked the task's owner) and `session_key`, which the consumer keeps so that
    its stream ends when the session does (`reports.streaming.credentials`). Any other
    path is refused.
    """

    def __init__(self) -> None:
        self.consumer = TaskConsumer.as_asgi()

    async def __call__(self, scope, receive, send):
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        match = TASK_SOCKET.fullmatch(path)
        if match is None:
            return await WebsocketDenier()(scope, receive, send)
        route = {"args": (), "kwargs": match.groupdict()}
        # The user only in the scope, which the consumer takes it from once it is checked.
        user = await threads.on_page_reads(session_user)(scope)
        scope = {**scope, "url_route": route, "user": user, "session_key": session_key(scope)}
        return await self.consumer(scope, receive, send)


def session_key(scope) -> str | None:
    """Return the handshake's session key, or None when its cookies name no session."""
    # Read as Django reads a request's cookies: another site's cookie that the standard
    # library's parser rejects (`prefs={"a":1}`) must not hide the session's.
    header = "; ".join(
        value.decode("latin-1") for name, value in scope.get("headers", []) if name == b"cookie"
    )
    key = parse_cookie(header).get(settings.SESSION_COOKIE_NAME)
    if not key or "\x00" in key:  # no session has one; PostgreSQL refuses it
        return None
    return key


def session_user(scope):
    """Return the user the handshake's session cookie names, or AnonymousUser.

    As `django.contrib.auth.get_user` checks a request: the session's user, through the
    backend it logged in with, and the session's hash of the user's password (a password
    change logs every other session out), the current secret key's or a fallback's. Only
    read: a socket cannot set a cookie, so a session a fallback key verified is left for
    the next page to rotate, and one that no longer verifies is refused, not flushed.
    """
    key = session_key(scope)
    if key is None:
        return AnonymousUser()
    session = import_module(settings.SESSION_ENGINE).SessionStore(key)
    try:
        user_id = auth.get_user_model()._meta.pk.to_python(session[auth.SESSION_KEY])
        backend_path = session[auth.BACKEND_SESSION_KEY]
    except (KeyError, ValueError):
        return AnonymousUser()
    if backend_path not in settings.AUTHENTICATION_BACKENDS:
        return AnonymousUser()
    user = auth.load_backend(backend_path).get_user(user_id)
    if user is None:
        return AnonymousUser()
    if not session_hash_holds(session.get(auth.HASH_SESSION_KEY), user):
        return AnonymousUser()
    return user


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
