"""Try again: a new task from an ended task's stored documents, the old task kept as it was,
through the API (POST /api/tasks/<id>/retry) and from the task page."""

import io

import pytest
from django.db.models.functions import Now

from reports.models import Budget, Document, Task, db_now_plus
from tests.helpers import assert_refused, form_cut_short, run_all, submit, task_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed(alice_client, worker) -> Task:
    """Alice's report that failed after some text, with instructions."""
    task = task_of(submit(alice_client, scenario="error", instructions="Focus on costs."))
    run_all(worker)
    task.refresh_from_db()
    assert task.status == "failed"
    return task


def shas(task: Task) -> list[str]:
    return list(Document.objects.filter(task=task).order_by("position").values_list("sha256"))


def test_retry_makes_a_new_task_of_the_same_documents_and_keeps_the_old_one(alice_client, failed):
    response = alice_client.post(f"/api/tasks/{failed.pk}/retry")
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "queued"
    assert response["Location"] == f"/api/tasks/{body['task_id']}"
    new = Task.objects.get(pk=body["task_id"])
    assert new.pk != failed.pk
    assert (new.instructions, new.scenario) == (failed.instructions, failed.scenario)
    assert shas(new) == shas(failed)
    failed.refresh_from_db()
    assert (failed.status, failed.error_type) == ("failed", "provider_error")


def test_retry_with_instructions_replaces_them(alice_client, failed):
    response = alice_client.post(
        f"/api/tasks/{failed.pk}/retry", {"instructions": "  Focus on risks.  "}
    )
    assert response.status_code == 201
    assert task_of(response).instructions == "Focus on risks."


def test_retry_whose_form_was_cut_by_the_upload_limit_is_413_and_makes_nothing(
    alice_client, failed, settings
):
    """The instructions after an oversize part were never read: not a retry without them."""
    settings.REPORTS_MAX_FILE_MB = 1
    body, content_type = form_cut_short("instructions", "Focus on risks.")
    response = alice_client.post(f"/api/tasks/{failed.pk}/retry", body, content_type)
    assert_refused(response, 413, "file_too_large")
    assert Task.objects.count() == 1


def test_retry_with_a_token_needs_no_csrf(failed, alice_token):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    response = client.post(
        f"/api/tasks/{failed.pk}/retry", headers={"Authorization": f"Bearer {alice_token}"}
    )
    assert response.status_code == 201


def test_try_again_from_a_stale_page_says_why_on_the_products_own_page(alice, failed):
    """A page left open while its user signed in again elsewhere holds an old token."""
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post(f"/tasks/{failed.pk}/retry/", {"csrfmiddlewaretoken": "x" * 64})

    assert response.status_code == 403
    page = response.content.decode()
    assert 'data-error-page="403"' in page
    assert "out of date" in page and "reload the page" in page
    assert Task.objects.count() == 1  # nothing was made


def test_retry_of_a_task_still_queued_is_409(alice_client):
    task = task_of(submit(alice_client))
    response = alice_client.post(f"/api/tasks/{task.pk}/retry")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "task_not_finished"
    assert Task.objects.count() == 1


def test_retry_of_someone_elses_task_is_404_like_a_missing_one(bob_client, failed):
    theirs = bob_client.post(f"/api/tasks/{failed.pk}/retry")
    missing = bob_client.post("/api/tasks/00000000-0000-0000-0000-000000000000/retry")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()
    assert Task.objects.count() == 1


def test_the_same_idempotency_key_makes_one_new_task(alice_client, failed):
    key = {"Idempotency-Key": "retry-1"}
    first = alice_client.post(f"/api/tasks/{failed.pk}/retry", headers=key)
    again = alice_client.post(f"/api/tasks/{failed.pk}/retry", headers=key)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["task_id"] == first.json()["task_id"]
    changed = alice_client.post(
        f"/api/tasks/{failed.pk}/retry", {"instructions": "Other."}, headers=key
    )
    assert changed.status_code == 422
    assert Task.objects.count() == 2


def test_retry_answers_the_budget_like_create(alice_client, alice, failed):
    budget = Budget.objects.get(user=alice)
    Budget.objects.filter(user=alice).update(
        limit_micros=budget.spent_micros + budget.reserved_micros
    )
    response = alice_client.post(f"/api/tasks/{failed.pk}/retry")
    assert response.status_code == 402
    assert response.json()["error"]["code"] == "budget_exhausted"
    assert Task.objects.count() == 1


def test_retry_of_a_scenario_the_server_no_longer_allows_is_400(alice_client, failed, settings):
    """The caller asked for no scenario: the answer says it is the task's, and what to do."""
    settings.REPORTS_ALLOW_SCENARIOS = False
    response = alice_client.post(f"/api/tasks/{failed.pk}/retry")
    assert_refused(response, 400, "invalid_request", "scenario 'error'", "upload its documents")
    assert Task.objects.count() == 1


# --- the page ------------------------------------------------------------------------------


def test_a_failed_page_offers_try_again_with_its_instructions_editable(alice_client, failed):
    page = alice_client.get(f"/tasks/{failed.pk}/").content.decode()
    assert 'data-action="retry"' in page
    assert f'action="/tasks/{failed.pk}/retry/"' in page
    assert ">Focus on costs.</textarea>" in page
    # Shown once the task ended without success: hidden while it runs.
    form = page[page.index("data-retry") :]
    assert form[: form.index(">")].count("hidden") == 0


def test_an_active_page_keeps_try_again_hidden(alice_client):
    task = task_of(submit(alice_client))
    page = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    form = page[page.index("data-retry") :]
    assert "hidden" in form[: form.index(">")]


def test_try_again_from_the_page_lands_on_the_new_task(alice_client, failed):
    response = alice_client.post(
        f"/tasks/{failed.pk}/retry/",
        {"idempotency_key": "page-1", "instructions": "Focus on risks."},
    )
    new = Task.objects.exclude(pk=failed.pk).get()
    assert response.status_code == 302
    assert response["Location"] == f"/tasks/{new.pk}/"
    assert new.instructions == "Focus on risks."


def test_try_again_of_an_unfinished_task_says_so_on_its_page(alice_client):
    task = task_of(submit(alice_client))
    response = alice_client.post(f"/tasks/{task.pk}/retry/", {"instructions": ""})
    assert response.status_code == 409
    assert b"data-retry-error" in response.content
    assert Task.objects.count() == 1


def test_retry_with_instructions_sent_as_a_file_is_refused_not_run_with_the_old_ones(
    alice_client, failed
):
    notes = io.BytesIO(b"Focus on risks.")
    notes.name = "notes.txt"
    response = alice_client.post(f"/api/tasks/{failed.pk}/retry", {"instructions": notes})
    assert_refused(response, 400, "invalid_request", "'instructions'", "text field")
    assert Task.objects.count() == 1


def test_a_retry_due_at_once_is_due_in_the_same_instant(make_task):
    """A retry with no delay is due at once, to the last digit of the database's clock. On
    SQLite, 'now plus nothing' read back as a text that sorts after 'now' within the same
    millisecond: a worker that claimed at once found nothing due."""
    task = make_task()
    due = Task.objects.filter(pk=task.pk).annotate(due=db_now_plus(0))
    assert due.filter(due__lte=Now()).exists()  # one statement: one 'now' on both sides
