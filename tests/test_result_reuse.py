"""With reuse=1, an earlier report of the same documents is offered again, never across
users; without it a new task is always made; idempotency replays keep their own meaning."""

import re

import pytest

from reports import submissions
from reports.models import Budget, Document, Task
from tests.helpers import SAMPLE, run_all, submit, task_of, upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def earlier(alice_client, worker) -> Task:
    """Alice's succeeded report of the sample, with instructions."""
    task = task_of(submit(alice_client, instructions="Focus on costs."))
    run_all(worker)
    task.refresh_from_db()
    assert task.status == "succeeded"
    return task


def reserved(user) -> int:
    return Budget.objects.get(user=user).reserved_micros


def test_the_same_documents_and_instructions_get_the_earlier_report_at_once(
    alice_client, alice, earlier
):
    spent = Budget.objects.get(user=alice).spent_micros
    response = submit(alice_client, instructions="Focus on costs.", reuse="1")
    assert response.status_code == 200
    assert response["Reused-Result"] == "true"
    assert "Idempotent-Replayed" not in response
    assert response.json()["task_id"] == str(earlier.pk)
    assert response.json()["result"]["sha256"] == earlier.result_sha256
    assert Task.objects.count() == 1
    assert (reserved(alice), Budget.objects.get(user=alice).spent_micros) == (0, spent)


def test_never_across_users(bob_client, earlier):
    response = submit(bob_client, instructions="Focus on costs.", reuse="1")
    assert response.status_code == 201
    assert "Reused-Result" not in response
    assert response.json()["task_id"] != str(earlier.pk)


@pytest.mark.parametrize(
    "change",
    [
        {"instructions": "Focus on risks."},
        {"instructions": "Focus on costs.", "files": [upload("article.md", SAMPLE + "\nMore.")]},
        {"instructions": "Focus on costs.", "scenario": "slow"},
    ],
    ids=["instructions", "documents", "scenario"],
)
def test_anything_else_changed_writes_a_new_report(alice_client, earlier, change):
    files = change.pop("files", [])
    response = submit(alice_client, *files, **change, reuse="1")
    assert response.status_code == 201
    assert response.json()["task_id"] != str(earlier.pk)


def test_another_model_or_prompt_version_writes_a_new_report(
    alice_client, earlier, settings, monkeypatch
):
    settings.REPORTS_PRICES = {
        **settings.REPORTS_PRICES,
        "other": {"input": 1, "output": 1, "cached_input": 1},
    }
    settings.REPORTS_MODEL = "other"
    assert submit(alice_client, instructions="Focus on costs.", reuse="1").status_code == 201
    settings.REPORTS_MODEL = earlier.model
    monkeypatch.setattr(submissions, "PROMPT_VERSION", f"{earlier.prompt_version}-changed")
    assert submit(alice_client, instructions="Focus on costs.", reuse="1").status_code == 201


def test_without_reuse_a_new_task_is_always_created(alice_client, alice, earlier):
    response = submit(alice_client, instructions="Focus on costs.")
    assert response.status_code == 201
    assert response.status_code == 201
    assert "Reused-Result" not in response
    assert response.json()["cost_status"] == "reserved"
    assert reserved(alice) > 0


def test_an_unfinished_task_is_not_offered(alice_client):
    first = submit(alice_client, reuse="1")
    second = submit(alice_client, reuse="1")
    assert (first.status_code, second.status_code) == (201, 201)


def test_an_idempotency_key_replay_still_answers_with_the_task_it_made(alice_client, worker):
    key = {"Idempotency-Key": "form-1"}
    made = submit(alice_client, headers=key)
    run_all(worker)
    # The same key: docs/api.md's replay, whatever the reuse rules would offer.
    again = submit(alice_client, headers=key, reuse="1")
    assert again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert "Reused-Result" not in again
    assert again.json()["task_id"] == made.json()["task_id"]
    # A new key with the same content: the earlier report is offered, nothing is made.
    other = submit(alice_client, headers={"Idempotency-Key": "form-2"}, reuse="1")
    assert (other.status_code, other["Reused-Result"]) == (200, "true")
    assert other.json()["task_id"] == made.json()["task_id"]
    assert Task.objects.count() == 1
    # …and that key stays unused: without reuse=1 it makes a new task.
    fresh = submit(alice_client, headers={"Idempotency-Key": "form-2"})
    assert fresh.status_code == 201
    assert Task.objects.filter(idempotency_key="form-2").count() == 1


# --- the pages -----------------------------------------------------------------------------


def test_the_task_page_says_the_report_was_made_earlier_and_offers_a_fresh_one(
    alice_client, earlier
):
    page = alice_client.get(f"/tasks/{earlier.pk}/?reused=1")
    assert b"data-reused" in page.content
    assert b"written earlier from the same documents" in page.content
    assert b"nothing was charged" not in page.content
    assert f'action="/tasks/{earlier.pk}/retry/"'.encode() in page.content
    assert b"data-reused" not in alice_client.get(f"/tasks/{earlier.pk}/").content


def test_write_a_fresh_one_resubmits_the_same_documents(alice_client, alice, earlier):
    response = alice_client.post(f"/tasks/{earlier.pk}/retry/", {"idempotency_key": "fresh-1"})
    fresh = Task.objects.exclude(pk=earlier.pk).get()
    assert response.status_code == 302
    assert response["Location"] == f"/tasks/{fresh.pk}/"
    assert (fresh.instructions, fresh.content_sha256) == (
        earlier.instructions,
        earlier.content_sha256,
    )
    shas = [
        list(Document.objects.filter(task=t).values_list("sha256", flat=True))
        for t in (earlier, fresh)
    ]
    assert shas[0] == shas[1]
    assert fresh.cost_status == "reserved"
    # A double click sends the same key: still one new task.
    alice_client.post(f"/tasks/{earlier.pk}/retry/", {"idempotency_key": "fresh-1"})
    assert Task.objects.count() == 2


def test_a_fresh_one_over_budget_says_so_on_the_page(alice_client, alice, earlier):
    Budget.objects.filter(user=alice).update(
        limit_micros=Budget.objects.get(user=alice).spent_micros
    )
    response = alice_client.post(f"/tasks/{earlier.pk}/retry/", {"idempotency_key": "fresh-2"})
    assert response.status_code == 402
    assert b"data-retry-error" in response.content
    assert b"cannot cover this report" in response.content
    assert Task.objects.count() == 1


def test_nobody_else_can_ask_for_a_fresh_copy(bob_client, earlier):
    assert bob_client.post(f"/tasks/{earlier.pk}/retry/").status_code == 404
    assert Task.objects.count() == 1


def test_the_upload_page_shows_the_remaining_budget(alice_client, alice, settings):
    settings.REPORTS_DEFAULT_BUDGET_MICROS = 2_500_000
    page = alice_client.get("/")
    assert b"data-budget" in page.content
    assert b"$2.50 left of $2.50" in page.content


def test_the_budget_line_separates_running_reports_from_an_admins_check(
    alice_client, alice, unanswered_task, settings
):
    task_of(submit(alice_client))  # queued: its reservation is held while it runs
    page = alice_client.get("/").content.decode()
    running = re.search(r"data-budget-running>(\$\d+\.\d\d|< \$0\.01) held for running", page)
    awaiting = re.search(
        r"data-budget-awaiting>(\$\d+\.\d\d|< \$0\.01) awaiting an admin's check", page
    )
    assert running and awaiting, page[page.index("data-budget") :][:400]
    assert "in progress" not in page
