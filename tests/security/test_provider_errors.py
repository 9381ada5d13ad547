"""What a provider's error says reaches staff, not users: the owner is told a plain sentence
for the kind of failure on every channel (API, events, page), and the provider's own text is
kept on the attempt, in admin (docs/security.md)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from reports.clock import Clock
from reports.models import TaskEvent
from reports.worker.supervisor import Supervisor
from tests.helpers import run_all, submit, task_of
from tests.providers.openai_server import Reply, error

pytestmark = pytest.mark.django_db

PROVIDER_TEXT = "Invalid schema for function 'internal_billing_tool' on deployment eu-7"


@pytest.mark.parametrize(
    ("status", "error_type", "plain"),
    [
        (400, "provider_rejected", "The provider refused the request."),
        (422, "provider_rejected", "The provider refused the request."),
    ],
)
@pytest.mark.usefixtures("worker_thread")
def test_the_owner_reads_a_plain_sentence_and_staff_the_provider_text(
    alice_client, openai_server, django_user_model, status, error_type, plain
):
    openai_server.queue(error(status, PROVIDER_TEXT))
    response = submit(alice_client)
    run_all(Supervisor(slots=1, clock=Clock()))
    task = task_of(response)
    assert (task.status, task.error_type) == ("failed", error_type)

    body = alice_client.get(f"/api/tasks/{task.pk}").json()
    assert body["error"] == {"type": error_type, "message": plain}
    # What the event stream and the WebSocket send: the stored events, as they are.
    events = json.dumps(list(TaskEvent.objects.filter(task=task).values_list("data", flat=True)))
    page = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    for seen in (events, page):
        assert "refused the request" in seen
        assert "internal_billing_tool" not in seen

    staff = Client()
    staff.force_login(django_user_model.objects.create_superuser("root", password="root-pass"))
    admin_page = staff.get(f"/admin/reports/task/{task.pk}/change/").content.decode()
    assert "internal_billing_tool" in admin_page


@pytest.mark.usefixtures("worker_thread")
def test_a_finish_reason_of_the_providers_own_is_never_shown(alice_client, openai_server):
    """A stream that ends for a reason other than "stop" fails `stream_truncated`; the
    reason is whatever text the provider sent, so the owner reads our sentence instead."""
    reason = "<script>alert(1)</script>shard-eu-7"
    openai_server.queue(Reply(finish_reason=reason))
    response = submit(alice_client)
    run_all(Supervisor(slots=1, clock=Clock()))
    task = task_of(response)
    assert (task.status, task.error_type) == ("failed", "stream_truncated")

    body = alice_client.get(f"/api/tasks/{task.pk}").json()
    assert body["error"]["message"] == (
        "The provider stopped before the report was complete, for its own reasons."
    )
    events = json.dumps(list(TaskEvent.objects.filter(task=task).values_list("data", flat=True)))
    page = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    for seen in (json.dumps(body), events, page):
        assert "shard-eu-7" not in seen and "script>alert" not in seen
