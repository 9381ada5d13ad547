"""A user's webhook endpoints: register one (its secret shown once), list them, remove one,
give one a new secret (shown once too); and reseal every secret under a new SECRET_KEY."""

from __future__ import annotations

import base64
import logging
import secrets
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from reports.auth import ApiError
from reports.models import WebhookEndpoint
from reports.serving import throttle
from reports.webhooks import addresses, sealing
from reports.webhooks.delivery import SECRET_UNREADABLE

log = logging.getLogger(__name__)

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
    limit_rate(user)
    try:
        addresses.resolve(url)
    except addresses.Refused as exc:
        raise Invalid(str(exc)) from None
    with transaction.atomic():
        # Counted under the user's own row lock (PostgreSQL; SQLite writes alone anyway),
        # so two requests at once cannot pass the limit together.
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        _refuse_past_limit(user)
        return WebhookEndpoint.objects.create(
            user=user, url=url, sealed_secret=sealing.seal(new_secret())
        )


def limit_rate(user) -> None:
    """Count one registration the user tries; refuse it, before its host is looked up,
    past REPORTS_WEBHOOK_RATE_LIMIT in the window: a lookup that outlives its wait keeps
    its thread until the system's resolver gives up, so tries on a name server that never
    answers must not come faster than those threads end. Counted in the cache, as a try
    refused leaves no row to count; a count out of reach refuses the try too."""
    limit, window = settings.REPORTS_WEBHOOK_RATE_LIMIT, settings.REPORTS_WEBHOOK_RATE_WINDOW_S
    try:
        wait = throttle.wait_s("webhook-registrations", str(user.pk), limit, window)
    except Exception:  # each cache backend raises its own connection errors
        log.exception("webhooks: the count of registrations is out of reach")
        raise ApiError(
            503,
            throttle.UNAVAILABLE,
            "Adding a webhook is unavailable for a moment; try again shortly.",
            {"Retry-After": "5"},
        ) from None
    if wait:
        raise ApiError(
            429,
            "rate_limited",
            f"You have tried to add {limit} webhook endpoints in the last {window} s; "
            f"try again in {wait} s.",
            {"Retry-After": str(wait)},
        )


def _refuse_past_limit(user) -> None:
    if WebhookEndpoint.objects.filter(user=user).count() >= MAX_ENDPOINTS:
        raise Invalid(f"You have {MAX_ENDPOINTS} endpoints, the most allowed; remove one first.")


def owned(user, endpoint_id) -> WebhookEndpoint | None:
    try:
        pk = uuid.UUID(str(endpoint_id))
    except ValueError:
        return None
    return WebhookEndpoint.objects.filter(user=user, pk=pk).first()


def new_secret_for(user, endpoint_id) -> WebhookEndpoint | None:
    """Give the user's endpoint a new secret, in place of the old one at once (the returned
    endpoint's secret is the only time it is shown); None when there is no such one. An
    endpoint turned off because its secret could no longer be read is turned on again."""
    endpoint = owned(user, endpoint_id)
    if endpoint is None:
        return None
    endpoint.sealed_secret = sealing.seal(new_secret())
    changed = ["sealed_secret"]
    if endpoint.disabled_at is not None and endpoint.disabled_reason == SECRET_UNREADABLE:
        endpoint.disabled_at, endpoint.disabled_reason, endpoint.consecutive_failures = None, "", 0
        changed += ["disabled_at", "disabled_reason", "consecutive_failures"]
    endpoint.save(update_fields=changed)
    return endpoint


@dataclass(frozen=True)
class Resealed:
    resealed: int  # sealed under a fallback key, now under SECRET_KEY
    current: int  # already under SECRET_KEY
    unreadable: int  # opened by no key: their owners must get a new secret


def reseal_all() -> Resealed:
    """Seal every endpoint's secret under the current SECRET_KEY, so that the keys in
    SECRET_KEY_FALLBACKS may go. A secret changed meanwhile (a new one asked for) is left
    as it now is."""
    resealed = current = unreadable = 0
    for pk, token in list(WebhookEndpoint.objects.values_list("pk", "sealed_secret")):
        if sealing.is_current(token):
            current += 1
            continue
        try:
            fresh = sealing.reseal(token)
        except sealing.Unreadable:
            unreadable += 1
            continue
        WebhookEndpoint.objects.filter(pk=pk, sealed_secret=token).update(sealed_secret=fresh)
        resealed += 1
    return Resealed(resealed, current, unreadable)


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
