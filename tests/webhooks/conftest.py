"""A resolver the test controls, a local receiver, an endpoint of alice's on it, and no
registration counted yet."""

from __future__ import annotations

import socket
import threading

import pytest
from django.core.cache import cache

from reports.clock import FakeClock
from reports.webhooks import endpoints
from tests.webhooks.receiver import NO_ANSWER, Receiver


@pytest.fixture(autouse=True)
def fresh_counts():
    """Start every test with no registration counted against any user."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def clock() -> FakeClock:
    """The senders' clock, a few seconds ahead of the real time at which a task's end
    writes its deliveries, so that they are due on it at once."""
    ahead = FakeClock()
    ahead.advance(5)
    return ahead


@pytest.fixture
def dns(monkeypatch):
    """Names the test maps to addresses (others resolve as usual); change it at any time.
    A name mapped to NO_ANSWER is looked up until the test ends, then not found."""
    names: dict[str, str] = {}
    real = socket.getaddrinfo
    ended = threading.Event()

    def getaddrinfo(host, port, *args, **kwargs):
        if names.get(host) == NO_ANSWER:
            ended.wait()
            raise socket.gaierror(socket.EAI_AGAIN, "the name server did not answer")
        if host in names:
            family = socket.AF_INET6 if ":" in names[host] else socket.AF_INET
            return [(family, socket.SOCK_STREAM, 6, "", (names[host], port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield names
    ended.set()


@pytest.fixture
def receiver():
    made = []

    def make(*answers) -> Receiver:
        made.append(Receiver(*answers))
        return made[-1]

    yield make
    for each in made:
        each.close()


@pytest.fixture
def local_hook(alice, dns, settings):
    """Return a factory: alice's endpoint on a local receiver answering as scripted, private
    addresses allowed (the receiver is on this machine)."""
    settings.REPORTS_WEBHOOK_ALLOW_PRIVATE = True

    def make(receiver: Receiver):
        dns["hooks.example.test"] = "127.0.0.1"
        return endpoints.register(alice, receiver.url)

    return make
