"""Django admin: a staff member who may only view changes nothing, whatever they send.

The walk covers every action and every page of every model admin Reportline registers,
so an action or view added later without its permission fails here.
"""

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.options import ActionLocation
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils.timezone import now

from reports.models import Budget, ShareLink, Task, WebhookDelivery, WebhookEndpoint
from tests.helpers import stored_files

pytestmark = pytest.mark.django_db

# What a form of any of these pages would need to go through, were it allowed.
FORM = {"post": "yes", "limit_usd": "0", "input_tokens": "0", "output_tokens": "0", "label": "x"}


@pytest.fixture
def viewer(django_user_model):
    """Staff with the view permission of every Reportline model, and nothing more."""
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="reports", codename__startswith="view_")
    )
    return user


def reportline_admins() -> list[admin.ModelAdmin]:
    return [
        model_admin
        for model_admin in admin.site._registry.values()
        if type(model_admin).__module__.startswith("reports.admin")
    ]


def state() -> tuple:
    """Every row of every Reportline table, and every stored file."""
    rows = {
        model._meta.label: sorted(map(repr, model.objects.values_list()))
        for model in apps.get_app_config("reports").get_models()
    }
    return rows, stored_files("uploads"), stored_files("results")


def pages(model_admin: admin.ModelAdmin) -> list[str]:
    """The URL of each of the admin's named pages, for each of its objects when it needs one."""
    ids = [str(pk) for pk in model_admin.model.objects.values_list("pk", flat=True)]
    urls = []
    for pattern in model_admin.get_urls():
        if not pattern.name:
            continue  # a redirect to a named page
        params = list(pattern.pattern.converters)
        if not params:
            urls.append(reverse(f"admin:{pattern.name}"))
        for pk in ids if params else ():
            urls.append(reverse(f"admin:{pattern.name}", kwargs={params[0]: pk}))
    return urls


def test_a_view_only_staff_member_changes_nothing_through_any_action_or_page(
    client, viewer, alice, alice_token, make_task, unanswered_task
):
    make_task()  # a queued task next to one waiting in reconciliation
    ShareLink.objects.issue(unanswered_task, 7)
    endpoint = WebhookEndpoint.objects.create(
        user=alice, url="https://hooks.example/", sealed_secret="s"
    )
    WebhookDelivery.objects.create(
        task=unanswered_task, endpoint=endpoint, event_type="x", body="{}", next_attempt_at=now()
    )
    Budget.objects.filter(user=alice).update(spent_micros=1_234_567)
    client.force_login(viewer)
    before = state()
    tried = set()

    for model_admin in reportline_admins():
        changelist = reverse(
            f"admin:{model_admin.opts.app_label}_{model_admin.opts.model_name}_changelist"
        )
        every = [str(pk) for pk in model_admin.model.objects.values_list("pk", flat=True)]
        for action in model_admin._get_base_actions():
            tried.add(action.name)
            response = client.post(
                changelist, {"action": action.name, "_selected_action": every, "index": 0, **FORM}
            )
            assert response.status_code < 500, (action.name, response.status_code)
            assert state() == before, f"the action {action.name} of {changelist} changed data"
        for action in model_admin._get_base_actions(ActionLocation.CHANGE_FORM):
            for pk in every:
                tried.add(action.name)
                url = reverse(
                    f"admin:{model_admin.opts.app_label}_{model_admin.opts.model_name}_change",
                    args=[pk],
                )
                response = client.post(
                    url, {"CHANGE_FORM-action": action.name, "_selected_action": pk, **FORM}
                )
                assert response.status_code < 500, (action.name, response.status_code)
                assert state() == before, f"the action {action.name} of {url} changed data"
        for url in pages(model_admin):
            tried.add(url)
            for send in (client.get, client.post):
                response = send(url, {**FORM, "user": alice.pk} if send == client.post else {})
                assert response.status_code < 500, (url, response.status_code)
                assert state() == before, f"{send.__name__.upper()} {url} changed data"

    # The walk reached what changes data for those allowed to.
    for name in (
        "start_new_period",
        "cancel_tasks",
        "requeue_reconciled",
        "delete_selected",
        "disable",
        "revoke",
    ):
        assert name in tried
    assert f"/admin/reports/task/{unanswered_task.pk}/settle/" in tried
    assert Budget.objects.get(user=alice).spent_micros == 1_234_567


def test_an_administrator_cannot_delete_a_task_that_holds_money_and_files(
    admin_client, make_task, alice
):
    """Deleting a row would leak its reservation and its upload: a task is cancelled instead."""
    task = make_task()
    reserved = Budget.objects.get(user=alice).reserved_micros
    uploads = stored_files("uploads")
    assert reserved > 0 and uploads

    page = admin_client.get(f"/admin/reports/task/{task.pk}/delete/")
    assert page.status_code == 403
    admin_client.post(f"/admin/reports/task/{task.pk}/delete/", {"post": "yes"})
    admin_client.post(
        "/admin/reports/task/",
        {"action": "delete_selected", "_selected_action": [task.pk], "post": "yes"},
    )
    assert Task.objects.filter(pk=task.pk).exists()
    assert Budget.objects.get(user=alice).reserved_micros == reserved
    assert stored_files("uploads") == uploads
    listing = admin_client.get("/admin/reports/task/").content.decode()
    assert "delete_selected" not in listing and "cancel_tasks" in listing
