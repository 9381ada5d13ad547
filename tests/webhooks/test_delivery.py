"""Deliveries: written with the task's end, signed, retried on a growing schedule with the
same webhook-id, the endpoint disabled once they keep failing; the address is checked again
at each connection and no redirect is followed."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from reports import lifecycle
from reports.models import DeliveryStatus, Status, WebhookDelivery
from reports.webhooks import endpoints, sealing
from reports.webhooks.delivery import RETRY_DELAYS_S, claim_due, deliver_due
from tests.helpers import run_all, whole_report
from tests.webhooks.receiver import NO_ANSWER, PUBLIC_IP

pytestmark = pytest.mark.django_db


def test_a_task_that_ends_is_posted_to_each_endpoint_signed_with_its_body(
    alice_client, make_task, scripted_worker, receiver, local_hook, clock
):
    inbox = receiver()
    hook = local_hook(inbox)
    task = make_task()
    run_all(scripted_worker(whole_report))

    assert deliver_due(clock) == 1

    [got] = inbox.received
    assert got.path == "/reportline"
    assert got.signed_by(sealing.unseal(hook.sealed_secret))
    assert abs(int(got.headers["webhook-timestamp"]) - clock.wall().timestamp()) < 2
    payload = json.loads(got.body)
    assert payload["type"] == "task.succeeded"
    assert payload["data"] == alice_client.get(f"/api/tasks/{task.pk}").json()
    assert payload["data"]["result"]["sha256"]
    delivery = WebhookDelivery.objects.get()
    assert str(delivery.pk) == got.webhook_id
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("delivered", 1, 200)
    assert deliver_due(clock) == 0  # delivered once


def test_a_failed_delivery_is_retried_within_30_s_with_the_same_id_and_bytes(
    make_task, receiver, local_hook, clock
):
    inbox = receiver(500)
    hook = local_hook(inbox)
    lifecycle.cancel_task(make_task())

    assert deliver_due(clock) == 1
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.last_status_code) == ("pending", 500)
    assert delivery.next_attempt_at <= clock.wall() + timedelta(seconds=30)
    assert deliver_due(clock) == 0  # not yet due
    clock.advance(RETRY_DELAYS_S[0])
    assert deliver_due(clock) == 1

    first, second = inbox.received
    assert inbox.answered == [500, 200]
    assert first.webhook_id == second.webhook_id == str(delivery.pk)
    assert first.body == second.body
    assert json.loads(first.body)["type"] == "task.cancelled"
    assert first.signed_by(sealing.unseal(hook.sealed_secret)) and second.signed_by(
        sealing.unseal(hook.sealed_secret)
    )
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("delivered", 2)


def test_an_endpoint_that_fails_for_a_day_is_disabled_with_its_reason(
    alice_client, make_task, receiver, local_hook, clock
):
    inbox = receiver(*[503] * 20)
    local_hook(inbox)
    lifecycle.cancel_task(make_task())

    tries = 0
    while WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING).exists():
        tries += deliver_due(clock)
        clock.advance(3600)
        assert tries <= len(RETRY_DELAYS_S) + 1
    assert tries == len(RETRY_DELAYS_S) + 1
    assert timedelta(hours=20) < clock.wall() - timezone.now() < timedelta(hours=30)

    [hook] = alice_client.get("/api/webhooks").json()["webhooks"]
    assert hook["disabled"] is True
    assert "503" in hook["disabled_reason"]
    assert hook["last_delivery"]["status"] == "failed"
    assert "503" in alice_client.get("/settings/webhooks/").content.decode()
    lifecycle.cancel_task(make_task())  # a disabled endpoint is sent nothing more
    assert WebhookDelivery.objects.count() == 1


def test_a_name_that_points_at_the_machine_by_delivery_time_is_not_connected(
    alice, make_task, receiver, dns, clock
):
    inbox = receiver()
    dns["hooks.example.test"] = PUBLIC_IP
    endpoints.register(alice, inbox.url)
    dns["hooks.example.test"] = "127.0.0.1"  # rebound after it was checked
    lifecycle.cancel_task(make_task())

    assert deliver_due(clock) == 1

    assert inbox.received == []
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "pending" and "127.0.0.1" in delivery.last_error


def test_a_name_server_that_never_answers_fails_the_try_in_the_tries_time(
    alice, make_task, receiver, dns, clock, settings
):
    # Its owner chose it; it must not hold one of the worker's few senders for longer.
    settings.REPORTS_WEBHOOK_TIMEOUT_S = 0.3
    inbox = receiver()
    dns["hooks.example.test"] = PUBLIC_IP
    endpoints.register(alice, inbox.url)
    dns["hooks.example.test"] = NO_ANSWER
    lifecycle.cancel_task(make_task())

    assert deliver_due(clock) == 1

    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "pending" and "not resolved within 0.3 s" in delivery.last_error
    assert delivery.next_attempt_at <= clock.wall() + timedelta(seconds=RETRY_DELAYS_S[0])


def test_a_redirect_is_a_failure_not_followed(make_task, receiver, local_hook, clock):
    inbox = receiver(307)
    local_hook(inbox)
    lifecycle.cancel_task(make_task())

    deliver_due(clock)

    assert [got.path for got in inbox.received] == ["/reportline"]
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.last_status_code) == ("pending", 307)


def test_removing_an_endpoint_drops_its_waiting_deliveries(
    alice, alice_client, make_task, receiver, local_hook, clock
):
    inbox = receiver()
    hook = local_hook(inbox)
    task = make_task()
    lifecycle.cancel_task(task)
    task.refresh_from_db()
    assert task.status == Status.CANCELLED

    assert alice_client.delete(f"/api/webhooks/{hook.pk}").status_code == 204

    assert deliver_due(clock) == 0
    assert inbox.received == []


def test_an_endpoint_that_does_not_answer_in_time_is_tried_again(
    make_task, receiver, local_hook, clock, settings
):
    settings.REPORTS_WEBHOOK_TIMEOUT_S = 0.3
    inbox = receiver("hang")
    local_hook(inbox)
    lifecycle.cancel_task(make_task())

    deliver_due(clock)
    inbox.release()

    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "pending" and delivery.last_status_code is None
    assert "0.3 s" in delivery.last_error
    assert delivery.next_attempt_at <= clock.wall() + timedelta(seconds=RETRY_DELAYS_S[0])


def test_one_users_backlog_never_takes_every_place_of_a_sender(
    alice, bob, make_task, receiver, local_hook, clock
):
    inbox = receiver()
    local_hook(inbox)
    endpoints.register(bob, inbox.url)
    for _ in range(3):
        lifecycle.cancel_task(make_task())  # alice's, first
    lifecycle.cancel_task(make_task(owner=bob))

    claimed = claim_due(2, clock)

    assert sorted(job.user_id for job in claimed) == sorted([alice.pk, bob.pk])
    # While the sender still sends alice's, her next ones wait for it.
    assert claim_due(2, clock, busy_users={alice.pk}) == []
    assert len(claim_due(2, clock)) == 1
