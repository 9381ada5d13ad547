"""Signing secrets sealed at rest: the database (and a dump of it, and the session that
carries a new secret to its page) never holds one; deliveries stay signed with the secret
the owner was shown, across a new SECRET_KEY and the reseal; a secret no key opens fails
its deliveries with a reason its owner and the staff read, and its owner gets a new one."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.core.management import call_command
from django.db import connection
from django.test import Client
from standardwebhooks import Webhook

from reports import lifecycle
from reports.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from reports.webhooks import endpoints, sealing
from reports.webhooks.delivery import SECRET_UNREADABLE, deliver_due
from tests.helpers import database_url, make_submission, wait_for
from tests.webhooks.receiver import PUBLIC_IP

ROOT = Path(__file__).resolve().parents[2]
OLD_KEY = "the-key-the-secrets-were-sealed-under-" + "o" * 20
NEW_KEY = "the-key-that-takes-over-" + "n" * 30


@pytest.fixture
def hooks_on(dns, settings):
    """Return a factory: register a receiver's URL through the API as the given client,
    returning the endpoint's id and the secret the answer showed."""
    settings.REPORTS_WEBHOOK_ALLOW_PRIVATE = True
    dns["hooks.example.test"] = "127.0.0.1"

    def register(client: Client, url: str) -> tuple[str, str]:
        answer = client.post("/api/webhooks", {"url": url}, content_type="application/json")
        assert answer.status_code == 201, answer.content
        return answer.json()["id"], answer.json()["secret"]

    return register


def stored_rows() -> str:
    """Every column of every endpoint row, as the database holds them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM reports_webhookendpoint")
        return repr(cursor.fetchall())


def dump() -> str:
    out = io.StringIO()
    call_command("dumpdata", "reports.webhookendpoint", stdout=out)
    return out.getvalue()


def shown_forms(secret: str) -> list[str]:
    """The secret as it was shown, and the key bytes' base64 alone."""
    return [secret, secret.removeprefix("whsec_")]


@pytest.mark.django_db
def test_neither_the_table_nor_a_dump_holds_a_secret(alice_client, dns):
    dns["hooks.example.com"] = PUBLIC_IP
    answer = alice_client.post(
        "/api/webhooks", {"url": "https://hooks.example.com/in"}, content_type="application/json"
    )
    secret = answer.json()["secret"]

    rows, dumped = stored_rows(), dump()
    for form in shown_forms(secret):
        assert form not in rows
        assert form not in dumped
    assert "https://hooks.example.com/in" in rows  # the row is there, its secret is not


@pytest.mark.django_db
def test_the_session_that_carries_a_new_secret_to_its_page_holds_it_sealed(alice_client, dns):
    dns["hooks.example.com"] = PUBLIC_IP
    alice_client.post("/settings/webhooks/", {"url": "https://hooks.example.com/in"})

    # Between the POST and the page it redirects to, the secret waits in the session row.
    waiting = SessionStore(alice_client.session.session_key).load()
    shown = alice_client.get("/settings/webhooks/").content.decode()

    [secret] = set(re.findall(r"whsec_[A-Za-z0-9+/=]+", shown))
    for form in shown_forms(secret):
        assert form not in json.dumps(waiting)
        assert form not in stored_rows()


@pytest.mark.django_db
def test_a_delivery_verifies_with_the_secret_its_owner_was_shown(
    alice_client, make_task, receiver, hooks_on, clock
):
    inbox = receiver()
    _, secret = hooks_on(alice_client, inbox.url)
    lifecycle.cancel_task(make_task())

    assert deliver_due(clock) == 1

    [got] = inbox.received
    assert got.signed_by(secret)  # the receiver's own HMAC
    # and a Standard Webhooks library's check, timestamp window included
    Webhook(secret).verify(got.body, got.headers)


@pytest.mark.django_db
def test_admin_never_shows_a_secret_sealed_or_not(alice_client, admin_client, hooks_on, receiver):
    hook_id, secret = hooks_on(alice_client, receiver().url)
    sealed = WebhookEndpoint.objects.get().sealed_secret

    for page in ("/admin/reports/webhookendpoint/", f"/admin/reports/webhookendpoint/{hook_id}/"):
        text = admin_client.get(page, follow=True).content.decode()
        assert "hooks.example.test" in text
        for form in [*shown_forms(secret), sealed]:
            assert form not in text, page


@pytest.mark.django_db
def test_under_a_new_secret_key_deliveries_stay_signed_and_the_reseal_frees_the_old_key(
    alice, alice_token, make_task, receiver, hooks_on, clock, settings
):
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = OLD_KEY, []
    api = Client(HTTP_AUTHORIZATION=f"Bearer {alice_token}")
    inbox = receiver()
    _, secret = hooks_on(api, inbox.url)
    sealed_before = WebhookEndpoint.objects.get().sealed_secret

    # The new key takes over; the old one stays a fallback until the reseal has run.
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = NEW_KEY, [OLD_KEY]
    lifecycle.cancel_task(make_task())
    assert deliver_due(clock) == 1
    out = io.StringIO()
    call_command("reseal_webhook_secrets", stdout=out)
    assert "Resealed 1 webhook secret(s)" in out.getvalue() and "0 already were" in out.getvalue()

    settings.SECRET_KEY_FALLBACKS = []
    lifecycle.cancel_task(make_task())
    assert deliver_due(clock) == 1

    first, second = inbox.received
    assert first.signed_by(secret) and second.signed_by(secret)
    assert WebhookDelivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 2
    assert WebhookEndpoint.objects.get().sealed_secret != sealed_before
    again = io.StringIO()
    call_command("reseal_webhook_secrets", stdout=again)
    assert (
        "Resealed 0 webhook secret(s)" in again.getvalue() and "1 already were" in again.getvalue()
    )


@pytest.mark.django_db
def test_a_secret_no_key_opens_fails_its_delivery_with_a_reason_and_a_new_secret_mends_it(
    alice, alice_token, admin_client, admin_user, make_task, receiver, hooks_on, clock, settings
):
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = OLD_KEY, []
    api = Client(HTTP_AUTHORIZATION=f"Bearer {alice_token}")
    inbox = receiver()
    hook_id, old_secret = hooks_on(api, inbox.url)
    lifecycle.cancel_task(make_task())  # waiting when the key goes
    settings.SECRET_KEY = NEW_KEY  # the old key dropped before any reseal
    lifecycle.cancel_task(make_task())
    errors = io.StringIO()
    call_command("reseal_webhook_secrets", stdout=io.StringIO(), stderr=errors)
    assert "1 webhook secret(s) open with no key" in errors.getvalue()

    assert deliver_due(clock) == 1  # the first fails for good, and the second with it
    assert deliver_due(clock) == 0  # nothing left to try again, ever
    assert inbox.received == []

    assert set(WebhookDelivery.objects.values_list("status", "last_error")) == {
        ("failed", SECRET_UNREADABLE)
    }
    [listed] = api.get("/api/webhooks").json()["webhooks"]
    assert listed["disabled"] is True
    assert listed["disabled_reason"] == SECRET_UNREADABLE
    assert listed["last_delivery"]["error"] == SECRET_UNREADABLE
    page = Client()
    page.force_login(alice)
    assert "can no longer be read" in page.get("/settings/webhooks/").content.decode()
    admin_client.force_login(admin_user)  # a session of the old key is over
    endpoint_page = admin_client.get(f"/admin/reports/webhookendpoint/{hook_id}/change/")
    assert "can no longer be read" in endpoint_page.content.decode()
    delivery = WebhookDelivery.objects.first()
    delivery_page = admin_client.get(f"/admin/reports/webhookdelivery/{delivery.pk}/change/")
    assert "can no longer be read" in delivery_page.content.decode()

    renewed = api.post(f"/api/webhooks/{hook_id}/secret")
    assert renewed.status_code == 200
    assert set(renewed.json()) == {"id", "url", "secret"}
    new_secret = renewed.json()["secret"]
    assert new_secret != old_secret
    [listed] = api.get("/api/webhooks").json()["webhooks"]
    assert listed["disabled"] is False and listed["disabled_reason"] is None

    lifecycle.cancel_task(make_task())
    assert deliver_due(clock) == 1
    [got] = inbox.received
    assert got.signed_by(new_secret) and not got.signed_by(old_secret)


@pytest.mark.django_db
def test_a_new_secret_on_the_page_is_shown_once_and_signs_from_then_on(
    alice_client, bob_client, make_task, receiver, hooks_on, clock
):
    inbox = receiver()
    hook_id, old_secret = hooks_on(alice_client, inbox.url)

    assert bob_client.post(f"/settings/webhooks/{hook_id}/secret").status_code == 404
    assert bob_client.post(f"/api/webhooks/{hook_id}/secret").status_code == 404
    renewed = alice_client.post(f"/settings/webhooks/{hook_id}/secret", follow=True)

    text = renewed.content.decode()
    [new_secret] = re.findall(r"whsec_[A-Za-z0-9+/=]+", text)
    assert new_secret != old_secret and "has a new signing secret" in text
    assert new_secret not in alice_client.get("/settings/webhooks/").content.decode()
    lifecycle.cancel_task(make_task())
    assert deliver_due(clock) == 1
    assert inbox.received[0].signed_by(new_secret)


@pytest.mark.django_db
def test_a_new_secret_does_not_turn_on_an_endpoint_the_staff_turned_off(
    alice_client, admin_client, receiver, hooks_on
):
    hook_id, _ = hooks_on(alice_client, receiver().url)
    admin_client.post(
        "/admin/reports/webhookendpoint/",
        {"action": "disable", "_selected_action": [hook_id]},
    )

    assert alice_client.post(f"/api/webhooks/{hook_id}/secret").status_code == 200

    [listed] = alice_client.get("/api/webhooks").json()["webhooks"]
    assert listed["disabled"] is True and "administrator" in listed["disabled_reason"]


@pytest.mark.django_db(transaction=True)
def test_a_worker_opens_secrets_under_its_fallback_keys_and_records_one_no_key_opens(
    alice, bob, receiver, tmp_path, settings
):
    settings.REPORTS_WEBHOOK_ALLOW_PRIVATE = True
    inbox = receiver()
    url = f"http://127.0.0.1:{inbox.port}/reportline"
    settings.SECRET_KEY = OLD_KEY
    alices = endpoints.register(alice, url)  # under a key the worker has as a fallback
    alices_secret = sealing.unseal(alices.sealed_secret)
    settings.SECRET_KEY = "a-key-nobody-has-any-more-" + "x" * 30
    endpoints.register(bob, url)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DJANGO_SECRET_KEY": NEW_KEY,
        "DJANGO_SECRET_KEY_FALLBACKS": f"an-older-key-{'y' * 30},{OLD_KEY}",
        "DATABASE_URL": database_url(connection.settings_dict),
        "REPORTS_DATA_DIR": str(tmp_path),
        "REPORTS_POLL_S": "0.05",
        "REPORTS_WEBHOOK_ALLOW_PRIVATE": "1",
    }
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "reportworker", "--slots", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        lifecycle.cancel_task(make_submission(bob))
        lifecycle.cancel_task(make_submission(alice))
        wait_for(
            lambda: not WebhookDelivery.objects.filter(status="pending").exists(),
            "both deliveries settled",
            timeout=30,
        )
        assert worker.poll() is None, "the worker stopped"
    finally:
        worker.kill()
        worker.wait(10)

    bobs = WebhookDelivery.objects.get(endpoint__user=bob)
    assert (bobs.status, bobs.attempts, bobs.last_error) == ("failed", 1, SECRET_UNREADABLE)
    assert WebhookDelivery.objects.get(endpoint=alices).status == "delivered"
    [got] = inbox.received
    assert got.signed_by(alices_secret)
