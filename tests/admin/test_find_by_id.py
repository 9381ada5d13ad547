"""An operator holding one id from a log line finds its task in admin: the task's, an
attempt's, the request's, the trace's, the worker's or the provider's request id."""

import pytest

from reports.models import Attempt
from tests.helpers import run_all, submit, task_of, upload

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/reports/task/"


@pytest.fixture
def two_tasks(alice_client, worker):
    tasks = [task_of(submit(alice_client, upload(f"doc-{i}.md"))) for i in range(2)]
    run_all(worker)
    for task in tasks:
        task.refresh_from_db()
    return tasks


def found(admin_client, term) -> list:
    response = admin_client.get(CHANGELIST, {"q": term})
    assert response.status_code == 200
    return [task.pk for task in response.context["cl"].result_list]


@pytest.mark.parametrize(
    "id_of",
    [
        lambda task, attempt: str(task.pk),
        lambda task, attempt: str(attempt.pk),
        lambda task, attempt: task.request_id,
        lambda task, attempt: task.trace_id,
        lambda task, attempt: attempt.provider_request_id,
        lambda task, attempt: f"  {task.trace_id.upper()} ",
    ],
    ids=["task", "attempt", "request", "trace", "provider request", "trace pasted"],
)
def test_any_id_of_a_log_line_finds_its_task_and_only_it(admin_client, two_tasks, id_of):
    task, _other = two_tasks
    attempt = Attempt.objects.get(task=task)
    assert task.request_id and task.trace_id and attempt.provider_request_id
    assert found(admin_client, id_of(task, attempt)) == [task.pk]


def test_a_worker_id_finds_the_tasks_it_ran(admin_client, two_tasks):
    task, _other = two_tasks
    Attempt.objects.filter(task=task).update(worker_id="host:123:abc")
    assert found(admin_client, "host:123:abc") == [task.pk]


def test_an_id_of_nothing_finds_nothing(admin_client, two_tasks):
    assert found(admin_client, "0" * 32) == []


def attempts_found(admin_client, term) -> list:
    response = admin_client.get("/admin/reports/attempt/", {"q": term})
    assert response.status_code == 200
    return [attempt.pk for attempt in response.context["cl"].result_list]


def test_the_attempt_list_finds_an_attempt_by_its_own_id_or_its_provider_request_id(
    admin_client, two_tasks
):
    task, _other = two_tasks
    attempt = Attempt.objects.get(task=task)
    assert attempts_found(admin_client, str(attempt.pk)) == [attempt.pk]
    assert attempts_found(admin_client, str(task.pk)) == [attempt.pk]
    assert attempts_found(admin_client, attempt.provider_request_id) == [attempt.pk]
