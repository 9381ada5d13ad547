"""One delivery attempt: claim due rows, send one signed POST, record what it answered.

Claims are one short transaction each: PostgreSQL skips rows another sender holds
(`FOR UPDATE SKIP LOCKED`), SQLite writes alone. A claim moves the row's next attempt past
the sender's own timeout, so a sender that dies mid-way leaves a row that comes due again
by itself; the same `webhook-id` goes out again (receivers drop repeats by it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import urllib3
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone
from standardwebhooks import Webhook

from reports.clock import Clock
from reports.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from reports.webhooks import addresses, sealing

# Seconds before each retry: the first within 30 s, the last about a day after the first try.
RETRY_DELAYS_S = (5, 30, 120, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600)
# Failed attempts in a row, across deliveries, that disable an endpoint before any one
# delivery exhausts its schedule (a busy user's dead endpoint).
MAX_CONSECUTIVE_FAILURES = 50
USER_AGENT = "Reportline-Webhooks/1"
# Due rows read for each place to fill, so that one user's backlog leaves others room.
CANDIDATES_PER_PLACE = 10
# Why a delivery failed, and its endpoint was turned off, when no key of the server opens
# its secret any more (SECRET_KEY changed without the old one in SECRET_KEY_FALLBACKS):
# nothing can be signed for it until its owner gets a new secret.
SECRET_UNREADABLE = (
    "The signing secret can no longer be read on this server (its secret key changed); "
    "get a new secret for this address to turn it on again."
)


@dataclass(frozen=True)
class Job:
    delivery_id: str
    endpoint_id: str
    user_id: int
    url: str
    sealed_secret: str  # opened only to sign, on the sending thread
    body: str


@dataclass(frozen=True)
class Outcome:
    status_code: int | None  # None: no answer (refused, unreachable, timed out)
    error: str = ""
    final: bool = False  # no later try could do better: fail it now

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def wall(clock: Clock | None) -> datetime:
    return (clock.wall() if clock else None) or timezone.now()


def claim_due(limit: int, clock: Clock | None = None, busy_users=()) -> list[Job]:
    """Claim up to `limit` due deliveries of enabled endpoints; return them to send.

    One a user at a time: at most one of a user's deliveries in a claim, none of the users
    in `busy_users` (those the caller is still sending for), so one user's slow or dead
    endpoints hold one of the sender's places, never all of them.
    """
    if limit <= 0:
        return []
    now = wall(clock)
    due = WebhookDelivery.objects.filter(
        status=DeliveryStatus.PENDING,
        next_attempt_at__lte=now,
        endpoint__disabled_at__isnull=True,
    ).exclude(endpoint__user_id__in=list(busy_users))
    # A read first: most looks find nothing, and take no write lock (SQLite's is the
    # whole database's) to find it.
    if not due.exists():
        return []
    with transaction.atomic():
        due = due.order_by("next_attempt_at").select_related("endpoint")
        if connection.vendor == "postgresql":
            due = due.select_for_update(skip_locked=True, of=("self",))
        rows, users = [], set()
        for row in due[: limit * CANDIDATES_PER_PLACE]:
            if row.endpoint.user_id not in users and len(rows) < limit:
                rows.append(row)
                users.add(row.endpoint.user_id)
        if not rows:
            return []
        hold = timedelta(seconds=2 * settings.REPORTS_WEBHOOK_TIMEOUT_S + 1)
        WebhookDelivery.objects.filter(pk__in=[r.pk for r in rows]).update(
            next_attempt_at=now + hold
        )
    return [
        Job(
            str(r.pk),
            str(r.endpoint_id),
            r.endpoint.user_id,
            r.endpoint.url,
            r.endpoint.sealed_secret,
            r.body,
        )
        for r in rows
    ]


def signed_headers(job: Job, secret: str, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers: the delivery's id, the attempt's time, its signature."""
    return {
        "webhook-id": job.delivery_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(job.delivery_id, at, job.body),
    }


def send(job: Job, clock: Clock | None = None) -> Outcome:
    """POST the job's body to its endpoint, signed; never follow a redirect. Blocks up to
    REPORTS_WEBHOOK_TIMEOUT_S: call it off the event loop."""
    try:
        secret = sealing.unseal(job.sealed_secret)
    except sealing.Unreadable:
        return Outcome(None, SECRET_UNREADABLE, final=True)
    try:
        target = addresses.resolve(job.url)  # again: the name may point elsewhere now
    except addresses.Refused as exc:
        return Outcome(None, str(exc))
    headers = {
        "Host": target.host if target.port in (80, 443) else f"{target.host}:{target.port}",
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        **signed_headers(job, secret, wall(clock)),
    }
    timeout = urllib3.Timeout(total=settings.REPORTS_WEBHOOK_TIMEOUT_S)
    # Connect to the address checked, naming the host for TLS: no second lookup to rebind.
    if target.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(
            target.ip,
            target.port,
            timeout=timeout,
            retries=False,
            server_hostname=target.host,
            assert_hostname=target.host,
            cert_reqs="CERT_REQUIRED",
        )
    else:
        pool = urllib3.HTTPConnectionPool(target.ip, target.port, timeout=timeout, retries=False)
    try:
        with pool:
            response = pool.urlopen(
                "POST",
                target.path,
                body=job.body.encode(),
                headers=headers,
                redirect=False,
                retries=False,
                preload_content=False,
                assert_same_host=False,
            )
            response.release_conn()
    except urllib3.exceptions.TimeoutError:
        return Outcome(None, f"No answer within {settings.REPORTS_WEBHOOK_TIMEOUT_S:g} s.")
    except urllib3.exceptions.HTTPError as exc:
        return Outcome(None, f"Could not connect: {type(exc).__name__}.")
    if 300 <= response.status < 400:
        return Outcome(response.status, "Redirects are not followed.")
    if not 200 <= response.status < 300:
        return Outcome(response.status, f"The endpoint answered {response.status}.")
    return Outcome(response.status)


def record(job: Job, outcome: Outcome, clock: Clock | None = None) -> None:
    """Write what the attempt came to: delivered, retried later, or failed for good (which
    disables the endpoint, with the reason its owner sees)."""
    now = wall(clock)
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.filter(pk=job.delivery_id, status=DeliveryStatus.PENDING)
            .only("attempts")
            .first()
        )
        if delivery is None:  # the endpoint was removed meanwhile
            return
        attempts = delivery.attempts + 1
        fields = {
            "attempts": attempts,
            "last_status_code": outcome.status_code,
            "last_error": outcome.error[:300],
        }
        endpoint = WebhookEndpoint.objects.filter(pk=job.endpoint_id)
        if outcome.ok:
            fields.update(status=DeliveryStatus.DELIVERED, delivered_at=now)
            endpoint.update(consecutive_failures=0)
        elif outcome.final:
            fields["status"] = DeliveryStatus.FAILED
            _disable(endpoint, now, outcome.error, delivery_error=outcome.error)
        elif attempts > len(RETRY_DELAYS_S):
            fields["status"] = DeliveryStatus.FAILED
            _disable(endpoint, now, f"Every try failed for a day; the last: {outcome.error}")
        else:
            fields["next_attempt_at"] = now + timedelta(seconds=RETRY_DELAYS_S[attempts - 1])
            endpoint.update(consecutive_failures=F("consecutive_failures") + 1)
            failures = endpoint.values_list("consecutive_failures", flat=True).first() or 0
            if failures >= MAX_CONSECUTIVE_FAILURES:
                _disable(
                    endpoint, now, f"{failures} tries in a row failed; the last: {outcome.error}"
                )
        WebhookDelivery.objects.filter(pk=job.delivery_id).update(**fields)


def _disable(
    endpoint, now: datetime, reason: str, delivery_error: str = "The endpoint was disabled."
) -> int:
    """Disable the endpoints still enabled of the queryset `endpoint`; their deliveries
    still waiting fail with them, with `delivery_error`. Return how many were disabled."""
    disabled = endpoint.filter(disabled_at__isnull=True).update(
        disabled_at=now, disabled_reason=reason[:300]
    )
    WebhookDelivery.objects.filter(endpoint__in=endpoint, status=DeliveryStatus.PENDING).update(
        status=DeliveryStatus.FAILED, last_error=delivery_error[:300]
    )
    return disabled


def disable_endpoints(endpoints, reason: str) -> int:
    """Disable `endpoints` (a queryset) as a failing one is disabled; return how many
    were enabled until now."""
    return _disable(endpoints, timezone.now(), reason)


def deliver_due(clock: Clock | None = None, limit: int = 100) -> int:
    """Send every due delivery once, one after the other; return how many were tried.
    (A failed one is due again later, not in this call.)
    (The worker sends them several at once: `reports.webhooks.sender`.)"""
    tried = 0
    while jobs := claim_due(limit, clock):
        for job in jobs:
            record(job, send(job, clock), clock)
        tried += len(jobs)
    return tried
