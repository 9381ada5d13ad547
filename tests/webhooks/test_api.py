"""The webhook routes: register (the secret shown once), list without secrets, remove;
what may not be registered, how many, and how often."""

from __future__ import annotations

import base64
import threading

import pytest
from django.core.cache.backends.redis import RedisCache

from reports.models import WebhookEndpoint
from reports.serving import throttle
from reports.webhooks import addresses, endpoints
from tests.helpers import assert_refused
from tests.webhooks.receiver import NO_ANSWER, PUBLIC_IP

pytestmark = pytest.mark.django_db


def register(client, url):
    return client.post("/api/webhooks", {"url": url}, content_type="application/json")


def test_a_registered_endpoint_gets_its_secret_once_and_is_listed_without_it(alice_client, dns):
    dns["hooks.example.com"] = PUBLIC_IP

    created = register(alice_client, "https://hooks.example.com/reportline")

    assert created.status_code == 201
    body = created.json()
    assert set(body) == {"id", "url", "secret"}
    assert body["url"] == "https://hooks.example.com/reportline"
    assert body["secret"].startswith("whsec_")
    assert 24 <= len(base64.b64decode(body["secret"].removeprefix("whsec_"))) <= 32
    listed = alice_client.get("/api/webhooks").json()["webhooks"]
    assert [hook["id"] for hook in listed] == [body["id"]]
    assert listed[0]["disabled"] is False and listed[0]["disabled_reason"] is None
    assert body["secret"] not in alice_client.get("/api/webhooks").content.decode()


def test_only_the_owner_removes_an_endpoint(alice_client, bob_client, dns):
    dns["hooks.example.com"] = PUBLIC_IP
    hook = register(alice_client, "https://hooks.example.com/").json()["id"]

    assert_refused(bob_client.delete(f"/api/webhooks/{hook}"), 404, "not_found")
    assert_refused(bob_client.delete("/api/webhooks/not-an-id"), 404, "not_found")
    assert bob_client.get("/api/webhooks").json() == {"webhooks": []}
    assert alice_client.delete(f"/api/webhooks/{hook}").status_code == 204
    assert alice_client.get("/api/webhooks").json() == {"webhooks": []}


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("ftp://hooks.example.com/", "http"),
        ("https://hooks.example.com/\u0000", "control characters"),
        ("https://hooks.example.com/" + "a" * 2000, "2,000"),
        ("http://127.0.0.1:8000/", "127.0.0.1"),
        ("http://10.1.2.3/", "10.1.2.3"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("http://[::1]/", "::1"),
        ("http://[::ffff:192.168.0.1]/", "192.168.0.1"),
        ("http://0.0.0.0/", "0.0.0.0"),
        # IPv6 addresses a translator or the host turns into a private IPv4 address
        ("http://[64:ff9b::a9fe:a9fe]/", "64:ff9b::a9fe:a9fe"),  # NAT64: the metadata service
        ("http://[64:ff9b::a00:1]/", "64:ff9b::a00:1"),  # NAT64: 10.0.0.1
        ("http://[::ffff:0:7f00:1]/", "::ffff:0:7f00:1"),  # SIIT: 127.0.0.1
        ("http://[::7f00:1]/", "::7f00:1"),  # IPv4-compatible: 127.0.0.1
        ("http://[fec0::1]/", "fec0::1"),  # site-local
        ("http://nat64.example.com/", "64:ff9b::c0a8:1"),  # a DNS64 answer for 192.168.0.1
        ("http://inside.example.com/", "127.0.0.1"),  # a name that points at the machine itself
    ],
)
def test_an_endpoint_that_is_not_a_public_http_address_is_refused(alice_client, dns, url, hint):
    dns["hooks.example.com"] = PUBLIC_IP
    dns["inside.example.com"] = "127.0.0.1"
    dns["nat64.example.com"] = "64:ff9b::c0a8:1"

    assert_refused(register(alice_client, url), 400, "invalid_request", hint)
    assert not WebhookEndpoint.objects.exists()


def test_a_public_address_through_nat64_is_accepted(alice_client, dns):
    """On a network reached by IPv6 only, DNS64 answers a public host's name with its
    IPv4 address under 64:ff9b::/96: that is a public address, and is kept."""
    dns["hooks.example.com"] = "64:ff9b::5db8:d70e"  # 93.184.215.14
    assert register(alice_client, "https://hooks.example.com/").status_code == 201


def test_a_name_whose_server_never_answers_is_refused_in_a_tries_time(alice_client, dns, settings):
    settings.REPORTS_WEBHOOK_TIMEOUT_S = 0.2
    dns["hooks.example.com"] = NO_ANSWER
    assert_refused(
        register(alice_client, "https://hooks.example.com/"),
        400,
        "invalid_request",
        "not resolved within 0.2 s",
    )
    assert not WebhookEndpoint.objects.exists()


def test_a_user_has_a_bounded_number_of_endpoints(alice_client, dns):
    dns["hooks.example.com"] = PUBLIC_IP
    for n in range(endpoints.MAX_ENDPOINTS):
        assert register(alice_client, f"https://hooks.example.com/{n}").status_code == 201

    # Refused before its address is looked up (this name has none), so at no lookup's cost.
    assert_refused(
        register(alice_client, "https://no-such-name.invalid/more"),
        400,
        "invalid_request",
        str(endpoints.MAX_ENDPOINTS),
    )


def lookup_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "reportline-webhook-lookup")


def test_registrations_past_the_rate_are_refused_before_any_lookup_and_others_go_on(
    alice, alice_client, bob_client, dns, settings, monkeypatch
):
    settings.REPORTS_WEBHOOK_RATE_LIMIT = 3
    settings.REPORTS_WEBHOOK_TIMEOUT_S = 0.1
    dns["silent.example.com"] = NO_ANSWER
    dns["hooks.example.com"] = PUBLIC_IP
    looked_up = []
    lookup = addresses._lookup
    monkeypatch.setattr(
        addresses, "_lookup", lambda host, port: looked_up.append(host) or lookup(host, port)
    )
    # Each try waits its 0.1 s and leaves its lookup on a thread until the resolver gives up.
    for n in range(3):
        tried = register(alice_client, f"https://silent.example.com/{n}")
        assert_refused(tried, 400, "invalid_request", "not resolved")
    assert len(looked_up) == 3
    left_behind = lookup_threads()

    refused = register(alice_client, "https://silent.example.com/again")
    assert_refused(refused, 429, "rate_limited", "3 webhook endpoints in the last 60 s")
    assert 1 <= int(refused["Retry-After"]) <= 60
    # A name that resolves at once is refused as well: the tries are counted, not the names.
    assert_refused(register(alice_client, "https://hooks.example.com/"), 429, "rate_limited")
    assert len(looked_up) == 3 and lookup_threads() <= left_behind  # no lookup, no thread
    assert not WebhookEndpoint.objects.exists()
    # Another user is not held back by alice's tries.
    assert register(bob_client, "https://hooks.example.com/bob").status_code == 201
    assert len(looked_up) == 4


def test_with_the_count_of_tries_out_of_reach_a_registration_is_refused_unlooked_up(
    alice_client, dns, monkeypatch
):
    dns["hooks.example.com"] = PUBLIC_IP
    unreachable = RedisCache("redis://127.0.0.1:1/0", {})  # nothing listens on port 1
    monkeypatch.setattr(throttle, "cache", unreachable)
    monkeypatch.setattr(addresses, "_lookup", lambda *_: pytest.fail("looked up"))
    refused = register(alice_client, "https://hooks.example.com/")
    assert_refused(refused, 503, "throttle_unavailable", "unavailable for a moment")
    assert refused["Retry-After"] == "5"
    assert not WebhookEndpoint.objects.exists()


def test_a_body_without_a_url_is_refused(alice_client):
    assert_refused(
        alice_client.post("/api/webhooks", "{}", content_type="application/json"),
        400,
        "invalid_request",
        "url",
    )
