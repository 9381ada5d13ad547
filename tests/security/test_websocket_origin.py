"""Who may open the live stream: a page of this very site, compared by scheme, host and port
(docs/security.md). Over the real ASGI application, with alice's own session, so that the
Origin is the only thing that differs."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from project.asgi import application
from tests.helpers import submit, task_of

pytestmark = pytest.mark.django_db(transaction=True)


@sync_to_async
def alice_task_and_cookie(alice) -> tuple[str, bytes]:
    client = Client()
    client.force_login(alice)
    task = task_of(submit(client))
    return str(task.pk), f"sessionid={client.cookies['sessionid'].value}".encode()


async def opens(alice, origin: str | None, host: str = "127.0.0.1", **headers) -> bool:
    task_id, cookie = await alice_task_and_cookie(alice)
    sent = [(b"host", host.encode()), (b"cookie", cookie)]
    if origin is not None:
        sent.append((b"origin", origin.encode()))
    sent += [(name.encode(), value.encode()) for name, value in headers.items()]
    comm = WebsocketCommunicator(application, f"/ws/tasks/{task_id}/?after=0", headers=sent)
    connected, _ = await comm.connect()
    await comm.disconnect()
    return connected


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:9999",  # the same host on another port
        "https://127.0.0.1",  # ...on another scheme
        "ftp://localhost",  # ...or no web scheme at all
        "http://localhost",  # an allowed host, but not the one this page was served from
        "http://127.0.0.1.evil.test",
        "null",  # a sandboxed frame or a file: page
        "http://127.0.0.1:80:80",
    ],
)
async def test_an_origin_other_than_the_page_own_is_refused(alice, origin):
    assert not await opens(alice, origin)


async def test_a_missing_origin_is_refused(alice):
    assert not await opens(alice, None)


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("http://127.0.0.1", "127.0.0.1"),
        ("http://127.0.0.1:80", "127.0.0.1"),  # the default port, spelled out
        ("http://127.0.0.1:8000", "127.0.0.1:8000"),
        ("HTTP://LocalHost:8000", "localhost:8000"),
    ],
)
async def test_the_page_own_origin_is_accepted(alice, origin, host):
    assert await opens(alice, origin, host)


async def test_a_host_that_is_not_allowed_is_refused_even_from_its_own_origin(alice):
    assert not await opens(alice, "http://evil.test", "evil.test")


async def test_behind_a_tls_proxy_the_https_origin_is_the_page_own(alice, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    proxied = {"x-forwarded-proto": "https"}
    assert await opens(alice, "https://localhost", "localhost", **proxied)
    assert not await opens(alice, "http://localhost", "localhost", **proxied)
    # Without the proxy's word the connection is plain, and so is the page's own origin.
    assert not await opens(alice, "https://localhost", "localhost")


async def test_a_trusted_origin_is_accepted(alice, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://app.example.com"]
    assert await opens(alice, "https://app.example.com", "127.0.0.1")
    assert not await opens(alice, "https://app.example.com:8443", "127.0.0.1")
