"""The outbox: one delivery row per endpoint of a task's owner, written by
`reports.lifecycle.end_task` in the transaction that ends the task, so an end that
committed always has its deliveries, whatever dies next."""

from __future__ import annotations

import json

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from reports.models import CompiledRead, Task, WebhookDelivery, WebhookEndpoint
from reports.serving.task_body import task_body


def write(task_id, status: str) -> int:
    """Write the deliveries of the task's end (in the caller's transaction); return how many.

    The body is frozen here: every attempt sends these same bytes.
    """
    # One query when the owner has no endpoint: the end's transaction stays as short as it was.
    endpoints = _ENDPOINTS.instances(task_id)
    if not endpoints:
        return 0
    task = Task.objects.get(pk=task_id)
    now = timezone.now()
    event_type = f"task.{status}"
    body = json.dumps(
        {"type": event_type, "timestamp": now.isoformat(), "data": task_body(task)},
        cls=DjangoJSONEncoder,
        separators=(",", ":"),
    )
    WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            endpoint=endpoint, task=task, event_type=event_type, body=body, next_attempt_at=now
        )
        for endpoint in endpoints
    )
    return len(endpoints)


# Every task's end reads them: compiled once (reports.models.compiled).
_ENDPOINTS = CompiledRead(
    lambda task_id: WebhookEndpoint.objects.filter(
        user_id=Task.objects.filter(pk=task_id).values("owner_id")[:1],
        disabled_at__isnull=True,
    ),
    lambda task_id: [(Task._meta.pk, task_id)],
)
