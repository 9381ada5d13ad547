"""The webhooks settings page: reached from every page's header, adds an address showing its
secret this once, refuses what the API refuses (too many tries too), removes one."""

from __future__ import annotations

import re

import pytest

from reports.models import WebhookEndpoint
from reports.webhooks import addresses, endpoints, sealing
from tests.webhooks.receiver import PUBLIC_IP

pytestmark = pytest.mark.django_db


def test_an_address_added_on_the_page_shows_its_secret_once_and_can_be_removed(alice_client, dns):
    dns["hooks.example.com"] = PUBLIC_IP
    assert 'href="/settings/webhooks/"' in alice_client.get("/").content.decode()

    added = alice_client.post(
        "/settings/webhooks/", {"url": "https://hooks.example.com/in"}, follow=True
    )

    hook = WebhookEndpoint.objects.get()
    assert added.redirect_chain == [("/settings/webhooks/", 302)]
    assert sealing.unseal(hook.sealed_secret) in added.content.decode()
    assert "no-store" in added["Cache-Control"]
    # A reload is a GET: no second endpoint, and the secret is not shown again.
    again = alice_client.get("/settings/webhooks/").content.decode()
    assert (
        "https://hooks.example.com/in" in again and sealing.unseal(hook.sealed_secret) not in again
    )
    assert WebhookEndpoint.objects.count() == 1
    removed = alice_client.post(f"/settings/webhooks/{hook.pk}/remove")
    assert removed.status_code == 302
    assert not WebhookEndpoint.objects.exists()


def test_the_page_refuses_a_private_address_and_says_why(alice_client):
    refused = alice_client.post("/settings/webhooks/", {"url": "http://192.168.1.10/hook"})

    assert refused.status_code == 400
    assert "192.168.1.10" in refused.content.decode()
    assert not WebhookEndpoint.objects.exists()


def test_each_remove_button_names_its_address(alice, alice_client, dns):
    # A screen reader's list of buttons would otherwise say "Remove" twice, and not which.
    dns["a.example.com"] = dns["b.example.com"] = PUBLIC_IP
    for url in ("https://a.example.com/in", "https://b.example.com/in"):
        endpoints.register(alice, url)
    html = alice_client.get("/settings/webhooks/").content.decode()
    buttons = [re.sub(r"<[^>]+>", "", b) for b in re.findall(r"<button[^>]*>(.*?)</button>", html)]
    assert "Remove https://a.example.com/in" in buttons
    assert "Remove https://b.example.com/in" in buttons


def test_another_users_address_cannot_be_removed(alice, bob_client, dns):
    dns["hooks.example.com"] = PUBLIC_IP
    hook = endpoints.register(alice, "https://hooks.example.com/in")

    assert bob_client.post(f"/settings/webhooks/{hook.pk}/remove").status_code == 404
    assert WebhookEndpoint.objects.filter(pk=hook.pk).exists()


def test_the_page_refuses_tries_past_the_rate_before_any_lookup(
    alice_client, bob_client, dns, settings, monkeypatch
):
    settings.REPORTS_WEBHOOK_RATE_LIMIT = 2
    dns["hooks.example.com"] = PUBLIC_IP
    for n in range(2):
        added = alice_client.post("/settings/webhooks/", {"url": f"https://hooks.example.com/{n}"})
        assert added.status_code == 302
    lookup = addresses._lookup
    monkeypatch.setattr(addresses, "_lookup", lambda *_: pytest.fail("looked up"))

    refused = alice_client.post("/settings/webhooks/", {"url": "https://hooks.example.com/2"})

    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 60
    page = refused.content.decode()
    assert "2 webhook endpoints in the last 60 s" in page
    assert 'value="https://hooks.example.com/2"' in page  # the address stays in the form
    assert WebhookEndpoint.objects.count() == 2
    monkeypatch.setattr(addresses, "_lookup", lookup)
    # Another user is not held back by alice's tries.
    other = bob_client.post("/settings/webhooks/", {"url": "https://hooks.example.com/b"})
    assert other.status_code == 302
