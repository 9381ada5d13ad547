"""Django admin for money: budgets listed and edited, cost shown, unknown costs settled."""

import re

import pytest

from reports import budgets, events
from reports.models import Attempt, Budget, Task
from reports.worker.leases import claim_next_task, mark_sent, reap_expired_leases
from tests.helpers import expire_lease, run_all

pytestmark = pytest.mark.django_db

BUDGETS = "/admin/reports/budget/"


@pytest.fixture
def pending(make_task, settings) -> Task:
    """Alice's failed task whose usage is unknown — its worker was lost during the call —
    so its reservation is still held."""
    settings.REPORTS_MAX_ATTEMPTS = 1
    task = make_task()
    assert claim_next_task("a-worker-that-dies") is not None
    expire_lease(task)
    reap_expired_leases()
    task.refresh_from_db()
    assert (task.status, task.cost_status) == ("failed", "pending_reconciliation")
    return task


def settle_url(task: Task) -> str:
    return f"/admin/reports/task/{task.pk}/settle/"


def test_budgets_are_listed_with_limit_spent_reserved_and_a_link_to_the_tasks(
    admin_client, make_task, alice
):
    task = make_task()
    page = admin_client.get(BUDGETS)
    assert page.status_code == 200
    text = page.content.decode()
    assert "alice" in text and "$5.0000" in text
    assert budgets.usd(task.reserved_micros, exact=True) in text
    assert f"/admin/reports/task/?owner__id__exact={alice.pk}" in text


def test_a_budgets_link_lists_its_users_tasks_and_no_one_elses(
    admin_client, make_task, django_user_model
):
    ann = django_user_model.objects.create_user("ann", password="pw")
    joanna = django_user_model.objects.create_user("joanna", password="pw")
    own = make_task(owner=ann)
    make_task(owner=joanna)
    listing = admin_client.get(BUDGETS).content.decode()
    link = re.search(r'href="([^"]+)">Tasks of ann<', listing).group(1)
    tasks = admin_client.get(link.replace("&amp;", "&"))
    assert tasks.status_code == 200
    assert [t.pk for t in tasks.context["cl"].result_list] == [own.pk]


def test_an_admin_raises_a_limit_without_touching_spent_or_reserved(admin_client, make_task, alice):
    make_task()
    budget = Budget.objects.get(user=alice)
    form = admin_client.get(f"{BUDGETS}{budget.pk}/change/")
    assert form.status_code == 200
    Budget.objects.filter(pk=budget.pk).update(spent_micros=1_234)  # a task settled meanwhile
    response = admin_client.post(f"{BUDGETS}{budget.pk}/change/", {"limit_usd": "12.5"})
    assert response.status_code == 302
    after = Budget.objects.get(pk=budget.pk)
    assert (after.limit_micros, after.spent_micros, after.reserved_micros) == (
        12_500_000,
        1_234,
        budget.reserved_micros,
    )


def test_a_limit_below_what_is_spent_and_reserved_is_refused(admin_client, make_task, alice):
    make_task()
    budget = Budget.objects.get(user=alice)
    response = admin_client.post(f"{BUDGETS}{budget.pk}/change/", {"limit_usd": "0.000001"})
    assert response.status_code == 200
    assert b"the limit cannot be lower" in response.content
    assert Budget.objects.get(pk=budget.pk).limit_micros == 5_000_000


def test_an_admin_gives_a_user_a_budget(admin_client, bob):
    response = admin_client.post(f"{BUDGETS}add/", {"user": bob.pk, "limit_usd": "1"})
    assert response.status_code == 302
    assert Budget.objects.get(user=bob).limit_micros == 1_000_000


def test_a_new_period_sets_spent_back_to_zero(admin_client, make_task, alice, worker):
    make_task()
    run_all(worker)
    assert Budget.objects.get(user=alice).spent_micros > 0
    admin_client.post(
        BUDGETS,
        {"action": "start_new_period", "_selected_action": [Budget.objects.get(user=alice).pk]},
    )
    assert Budget.objects.get(user=alice).spent_micros == 0


def test_the_task_pages_show_cost_status_and_cost_per_attempt(admin_client, make_task, worker):
    task = make_task()
    run_all(worker)
    task.refresh_from_db()
    listing = admin_client.get("/admin/reports/task/", {"cost_status__exact": "settled"})
    assert [t.pk for t in listing.context["cl"].result_list] == [task.pk]
    page = admin_client.get(f"/admin/reports/task/{task.pk}/change/").content.decode()
    assert "Settled" in page
    assert page.count(budgets.usd(task.cost_micros, exact=True)) >= 2  # the task and its attempt


def test_settle_by_entering_the_usage(admin_client, pending, alice):
    page = admin_client.get(f"/admin/reports/task/{pending.pk}/change/")
    assert settle_url(pending).encode() in page.content
    assert admin_client.get(settle_url(pending)).status_code == 200
    response = admin_client.post(
        settle_url(pending), {"input_tokens": "1000", "output_tokens": "200", "cached_tokens": ""}
    )
    assert response.status_code == 302
    pending.refresh_from_db()
    cost = budgets.usage_cost(pending.model, 1000, 200, None)
    assert (pending.cost_status, pending.cost_micros) == ("settled", cost)
    budget = Budget.objects.get(user=alice)
    assert (budget.spent_micros, budget.reserved_micros) == (cost, 0)


def test_the_settle_page_is_an_admin_page_with_its_breadcrumbs(admin_client, pending):
    page = admin_client.get(settle_url(pending)).content.decode()
    assert "/static/admin/css/base.css" in page and "/static/admin/css/forms.css" in page
    trail = re.search(r'<ol class="breadcrumbs">(.*?)</ol>', page, re.S).group(1)
    crumbs = [re.sub(r"<[^>]+>", "", item).strip() for item in re.findall(r"<li.*?</li>", trail)]
    assert crumbs == ["Home", "Reports", "Tasks", str(pending), "Settle"]
    links = re.findall(r'href="([^"]+)"', trail)
    assert links == [
        "/admin/",
        "/admin/reports/",
        "/admin/reports/task/",
        f"/admin/reports/task/{pending.pk}/change/",
    ]
    assert "data-settle" in page and 'name="input_tokens"' in page


def test_settle_by_accepting_the_reservation(admin_client, pending, alice):
    held = pending.reserved_micros
    admin_client.post(settle_url(pending), {})
    pending.refresh_from_db()
    assert (pending.cost_status, pending.cost_micros) == ("settled", held)
    assert Budget.objects.get(user=alice).spent_micros == held


def test_settling_a_task_in_reconciliation_marks_it_failed(admin_client, unanswered_task, alice):
    task = unanswered_task
    assert task.status == "reconciliation_required"
    admin_client.post(settle_url(task), {"input_tokens": "500", "output_tokens": "0"})
    task.refresh_from_db()
    assert (task.status, task.cost_status) == ("failed", "settled")
    assert task.cost_micros == budgets.usage_cost(task.model, 500, 0, None)
    assert Budget.objects.get(user=alice).reserved_micros == 0


def test_a_settled_task_is_not_settled_twice(admin_client, pending, alice):
    admin_client.post(settle_url(pending), {})
    spent = Budget.objects.get(user=alice).spent_micros
    response = admin_client.post(settle_url(pending), {"input_tokens": "9", "output_tokens": "9"})
    assert response.status_code == 302
    assert Budget.objects.get(user=alice).spent_micros == spent


def test_a_cost_settled_at_an_estimate_is_corrected_from_the_providers_records(
    admin_client, make_task, alice, settings
):
    settings.REPORTS_MAX_ATTEMPTS = 1
    task = make_task()
    claim = claim_next_task("a-worker-that-dies")  # lost after its text began
    assert mark_sent(claim.task_id, claim.attempt_id, claim.epoch, 30_000)
    Task.objects.append_event(claim.task_id, claim.epoch, events.delta("Some text" * 50))
    expire_lease(task)
    reap_expired_leases()
    task.refresh_from_db()
    assert (task.cost_status, Attempt.objects.get(task=task).usage_source) == (
        "settled",
        "estimate",
    )
    page = admin_client.get(f"/admin/reports/task/{task.pk}/change/").content.decode()
    assert "Correct the estimated cost" in page
    assert b"charged" in admin_client.get(settle_url(task)).content
    admin_client.post(settle_url(task), {"input_tokens": "9000", "output_tokens": "120"})
    task.refresh_from_db()
    cost = budgets.usage_cost(task.model, 9000, 120, None)
    assert (task.cost_status, task.cost_micros) == ("settled", cost)
    assert Budget.objects.get(user=alice).spent_micros == cost
    assert Attempt.objects.get(task=task).usage_source == "provider"


def test_only_staff_with_the_change_permission_settle(client, alice, pending):
    client.force_login(alice)
    response = client.post(settle_url(pending), {})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    pending.refresh_from_db()
    assert pending.cost_status == "pending_reconciliation"


def test_the_attempt_list_shows_each_attempts_cost(admin_client, pending, make_task, worker):
    done = make_task(content="# Another\n\nA different document, written in full.\n")
    run_all(worker)
    done.refresh_from_db()
    page = admin_client.get("/admin/reports/attempt/").content.decode()
    assert budgets.usd(done.cost_micros, exact=True) in page
    assert "unknown" in page  # the pending task's attempt
