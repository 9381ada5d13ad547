"""A user's webhook endpoints: register one (its secret shown once), list them, remove one."""

from __future__ import annotations

import base64
import secrets
import uuid

from django.contrib.auth import get_user_model
from django.db import transaction

from reports.models import WebhookEndpoint
from reports.webhooks import addresses

MAX_ENDPOINTS = 10  # a user's endpoints: each ended task is one delivery to each
SECRET_BYTES = 32


class Invalid(Exception):
    """The endpoint cannot be registered; the message says why, for the user."""


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def register(user, url) -> WebhookEndpoint:
    """Register `url` for the user's tasks, or raise Invalid. The returned endpoint's
    secret is the only time it is shown."""
    # Counted before the address is looked up too: a user at the limit costs no lookup,
    # which may wait seconds on a name server the user chose.
    _refuse_past_limit(user)
    try:
        addresses.resolve(url)
    except addresses.Refused as exc:
        raise Invalid(str(exc)) from None
    with transaction.atomic():
        # Counted under the user's own row lock (PostgreSQL; SQLite writes alone anyway),
        # so two requests at once cannot pass the limit together.
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        _refuse_past_limit(user)
        return WebhookEndpoint.objects.create(user=user, url=url, secret=new_secret())


def _refuse_past_limit(user) -> None:
    if WebhookEndpoint.objects.filter(user=user).count() >= MAX_ENDPOINTS:
        raise Invalid(f"You have {MAX_ENDPOINTS} endpoints, the most allowed; remove one first.")


def owned(user, endpoint_id) -> WebhookEndpoint | None:
    try:
        pk = uuid.UUID(str(endpoint_id))
    except ValueError:
        return None
    return WebhookEndpoint.objects.filter(user=user, pk=pk).first()


def remove(user, endpoint_id) -> bool:
    """Remove the user's endpoint and its deliveries; False when there is no such one."""
    endpoint = owned(user, endpoint_id)
    if endpoint is None:
        return False
    endpoint.delete()
    return True


def listing(user) -> list[dict]:
    """The user's endpoints as the API lists them: never their secrets."""
    endpoints = WebhookEndpoint.objects.filter(user=user).order_by("created_at", "pk")
    rows = []
    for endpoint in endpoints:
        last = endpoint.deliveries.exclude(attempts=0).order_by("-created_at").first()
        rows.append(
            {
                "id": str(endpoint.pk),
                "url": endpoint.url,
                "created_at": endpoint.created_at.isoformat(),
                "disabled": endpoint.disabled_at is not None,
                "disabled_reason": endpoint.disabled_reason or None,
                "last_delivery": (
                    {
                        "status": last.status,
                        "attempts": last.attempts,
                        "status_code": last.last_status_code,
                        "error": last.last_error or None,
                    }
                    if last
                    else None
                ),
            }
        )
    return rows
