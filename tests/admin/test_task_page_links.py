"""A task's page in admin costs the same few queries however many webhook deliveries,
share links and attempts it has, and links to each attempt's and delivery's own page."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from reports.models import Attempt, ShareLink, WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db


def change_url(task) -> str:
    return f"/admin/reports/task/{task.pk}/change/"


def deliver(task, count: int) -> list[WebhookDelivery]:
    deliveries = []
    for i in range(count):
        endpoint = WebhookEndpoint.objects.create(
            user=task.owner, url=f"https://hooks.example/{i}", sealed_secret="whsec_x"
        )
        deliveries.append(
            WebhookDelivery.objects.create(
                task=task,
                endpoint=endpoint,
                event_type="task.failed",
                body="{}",
                status="failed",
                attempts=5,
                last_status_code=502,
                next_attempt_at=timezone.now(),
            )
        )
    return deliveries


def queries(admin_client, task) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert admin_client.get(change_url(task)).status_code == 200
    return len(captured)


def test_the_task_page_costs_the_same_queries_with_many_deliveries(admin_client, make_task):
    task = make_task()
    deliver(task, 1)
    ShareLink.objects.issue(task, 7)
    queries(admin_client, task)  # the first fills Django's caches (content types)
    few = queries(admin_client, task)
    deliver(task, 12)
    for _ in range(12):
        ShareLink.objects.issue(task, 7)
    assert queries(admin_client, task) == few


def test_the_task_page_links_to_its_attempts_and_deliveries(admin_client, make_task):
    task = make_task()
    attempt = Attempt.objects.create(task=task, number=1, epoch=1)
    (delivery,) = deliver(task, 1)
    page = admin_client.get(change_url(task)).content.decode()
    assert f"/admin/reports/attempt/{attempt.pk}/change/" in page
    assert f"/admin/reports/webhookdelivery/{delivery.pk}/change/" in page
    assert f"/admin/reports/webhookendpoint/{delivery.endpoint_id}/change/" in page
