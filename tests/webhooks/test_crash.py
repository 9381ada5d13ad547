"""The outbox outlives its worker: a worker SIGKILLed while it sends a delivery leaves the
row behind, and the next worker sends it, with the same webhook-id."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from reports import lifecycle
from reports.models import WebhookDelivery
from reports.webhooks import endpoints, sealing
from tests.helpers import database_url, make_submission, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def test_a_delivery_left_by_a_killed_worker_is_sent_by_the_next(
    alice, receiver, tmp_path, settings
):
    settings.REPORTS_WEBHOOK_ALLOW_PRIVATE = True
    inbox = receiver("hang")  # the first worker's POST gets no answer: it dies waiting
    hook = endpoints.register(alice, f"http://127.0.0.1:{inbox.port}/reportline")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,
        "DATABASE_URL": database_url(connection.settings_dict),
        "REPORTS_DATA_DIR": str(tmp_path),
        "REPORTS_POLL_S": "0.05",
        "REPORTS_WEBHOOK_ALLOW_PRIVATE": "1",
        "REPORTS_WEBHOOK_TIMEOUT_S": "2",  # a claim is held twice that, plus 1 s
    }

    def worker() -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "manage.py", "reportworker", "--slots", "1"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    first = worker()
    try:
        lifecycle.cancel_task(make_submission(alice))  # the end commits with its delivery
        assert inbox.arrived.wait(30), "the first worker never sent the delivery"
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        inbox.release()
        delivery = WebhookDelivery.objects.get()
        assert delivery.status == "pending" and delivery.attempts == 0

        second = worker()
        try:
            wait_for(
                lambda: WebhookDelivery.objects.filter(status="delivered").exists(),
                "the second worker's delivery",
                timeout=30,
            )
        finally:
            second.kill()
            second.wait(10)
    finally:
        first.kill()
        first.wait(10)

    assert inbox.answered == [200]  # one answered POST; the killed worker's got none
    assert {got.webhook_id for got in inbox.received} == {str(delivery.pk)}
    assert all(got.signed_by(sealing.unseal(hook.sealed_secret)) for got in inbox.received)
    assert json.loads(inbox.received[-1].body)["type"] == "task.cancelled"
    delivery.refresh_from_db()
    assert delivery.attempts == 1
