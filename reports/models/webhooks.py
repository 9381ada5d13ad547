"""Webhooks (docs/webhooks.md): a user's endpoints, and the outbox of deliveries to them.

A delivery row is written in the same transaction as the end of its task
(`reports.lifecycle`), its body frozen then; the worker sends it (`reports.webhooks.sender`).
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models.functions import Now

from reports.models.tasks import Task


class WebhookEndpoint(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_endpoints"
    )
    url = models.CharField(max_length=2000)
    # The signing secret (`whsec_` + base64), sealed under a key derived from SECRET_KEY
    # (reports.webhooks.sealing): signing needs it back, a database dump alone must not give it. A
    # Fernet token of a secret of up to 64 characters is 184 (docs/webhooks.md#the-secret).
    sealed_secret = models.CharField(max_length=200)
    created_at = models.DateTimeField(db_default=Now())
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=300, blank=True)
    # Attempts in a row that failed, across deliveries; a success sets it back to 0.
    consecutive_failures = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return self.url


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookDelivery(models.Model):
    # Sent as `webhook-id`: the same on every attempt, so a receiver can drop repeats.
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="webhooks")
    event_type = models.CharField(max_length=64)
    body = models.TextField()  # the JSON sent, byte for byte the same on every attempt
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    # When it may be sent next; a sender that claims it moves this past its own timeout.
    next_attempt_at = models.DateTimeField()
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="webhook_due")]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.event_type} → {self.endpoint_id}"
