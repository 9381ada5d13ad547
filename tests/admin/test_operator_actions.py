"""What an operator does to stop harm during an incident: disable a webhook endpoint,
revoke a share link, revoke an API token. Each says what it did, and what it found
already done by someone else."""

import pytest
from django.utils import timezone

from reports.models import ApiToken, DeliveryStatus, ShareLink, WebhookDelivery, WebhookEndpoint
from tests.helpers import run_all

pytestmark = pytest.mark.django_db


def act(client, changelist: str, action: str, *pks):
    return client.post(
        changelist,
        {"action": action, "_selected_action": [str(pk) for pk in pks]},
        follow=True,
    )


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


@pytest.fixture
def endpoint(alice, make_task):
    endpoint = WebhookEndpoint.objects.create(
        user=alice, url="https://hooks.example/in", sealed_secret="whsec_x"
    )
    WebhookDelivery.objects.create(
        task=make_task(),
        endpoint=endpoint,
        event_type="task.succeeded",
        body="{}",
        next_attempt_at=timezone.now(),
    )
    return endpoint


def test_disabling_an_endpoint_fails_its_waiting_deliveries_and_says_so(
    admin_client, admin_user, endpoint
):
    response = act(admin_client, "/admin/reports/webhookendpoint/", "disable", endpoint.pk)
    assert response.status_code == 200
    assert messages_of(response) == [
        "1 endpoint(s) disabled, their waiting deliveries failed; 0 already disabled."
    ]
    endpoint.refresh_from_db()
    assert endpoint.disabled_at is not None
    assert endpoint.disabled_reason == f"Disabled by an administrator ({admin_user.username})."
    assert list(endpoint.deliveries.values_list("status", flat=True)) == [DeliveryStatus.FAILED]


def test_an_endpoint_disabled_meanwhile_is_counted_as_already_disabled(admin_client, endpoint):
    act(admin_client, "/admin/reports/webhookendpoint/", "disable", endpoint.pk)
    disabled_at = WebhookEndpoint.objects.get(pk=endpoint.pk).disabled_at
    again = act(admin_client, "/admin/reports/webhookendpoint/", "disable", endpoint.pk)
    assert again.status_code == 200
    assert messages_of(again) == [
        "0 endpoint(s) disabled, their waiting deliveries failed; 1 already disabled."
    ]
    assert WebhookEndpoint.objects.get(pk=endpoint.pk).disabled_at == disabled_at


@pytest.fixture
def shared_task(make_task, worker):
    task = make_task()
    run_all(worker)
    return task


def test_share_links_are_listed_and_revoked_with_counts(admin_client, shared_task):
    _, live = ShareLink.objects.issue(shared_task, 7)
    _, gone = ShareLink.objects.issue(shared_task, 7)
    ShareLink.objects.filter(pk=gone.pk).update(revoked_at=timezone.now())

    listing = admin_client.get("/admin/reports/sharelink/", {"q": str(shared_task.pk)})
    assert listing.status_code == 200
    assert {link.pk for link in listing.context["cl"].result_list} == {live.pk, gone.pk}
    assert live.token_hash not in listing.content.decode()

    response = act(admin_client, "/admin/reports/sharelink/", "revoke", live.pk, gone.pk)
    assert messages_of(response) == ["1 share link(s) revoked; 1 already revoked or expired."]
    assert not ShareLink.objects.live().exists()


def test_a_token_is_revoked_by_deleting_it(admin_client, alice, alice_token):
    token = ApiToken.objects.get(user=alice)
    confirm = act(admin_client, "/admin/reports/apitoken/", "delete_selected", token.pk)
    assert confirm.status_code == 200
    done = admin_client.post(
        "/admin/reports/apitoken/",
        {"action": "delete_selected", "_selected_action": [token.pk], "post": "yes"},
        follow=True,
    )
    assert done.status_code == 200
    assert not ApiToken.objects.filter(pk=token.pk).exists()
    assert ApiToken.objects.user_for(alice_token) is None


def test_deliveries_are_found_by_their_webhook_id_their_task_or_their_endpoint(
    admin_client, endpoint
):
    (delivery,) = endpoint.deliveries.all()
    other = WebhookDelivery.objects.create(
        task=delivery.task,
        endpoint=WebhookEndpoint.objects.create(
            user=endpoint.user, url="https://elsewhere.example/", sealed_secret="whsec_y"
        ),
        event_type="task.succeeded",
        body="{}",
        next_attempt_at=timezone.now(),
    )

    def found(term) -> set:
        response = admin_client.get("/admin/reports/webhookdelivery/", {"q": term})
        assert response.status_code == 200
        return {d.pk for d in response.context["cl"].result_list}

    assert found(str(delivery.pk)) == {delivery.pk}
    assert found(str(endpoint.pk)) == {delivery.pk}
    assert found(str(delivery.task_id)) == {delivery.pk, other.pk}
    assert found("elsewhere") == {other.pk}
