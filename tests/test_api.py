"""The JSON API of docs/api.md as a script sees it: bodies, listing, idempotency, ownership,
authentication, downloads, timing reports and cancel."""

from __future__ import annotations

import hashlib
import io
import re
import threading
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import OperationalError, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils.crypto import get_random_string

from reports import events
from reports.models import Document, Status, Task
from reports.worker.leases import claim_next_task
from tests.helpers import (
    SAMPLE,
    assert_refused,
    run_all,
    saved_report,
    store_passages,
    stored_files,
    submit,
    task_of,
    tasks_of_every_kind,
    upload,
)

pytestmark = pytest.mark.django_db

TASK_KEYS = {
    "task_id",
    "status",
    "lane",
    "url",
    "events_url",
    "ws_url",
    "created_at",
    "queue_position",
    "attempts",
    "text_length",
    "partial",
    "error",
    "result",
    "timings",
    "usage",
    "cost_status",
}
TIMING_KEYS = {"queue_ms", "first_text_ms", "frontend_first_text_ms", "duration_ms"}
COST_STATUSES = {"none", "reserved", "settled", "pending_reconciliation", "released"}


def detail(client, task_id):
    return client.get(f"/api/tasks/{task_id}")


def error_of(response) -> str:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    return body["error"]["code"]


def succeeded_task(client, worker, **fields) -> Task:
    task = task_of(submit(client, **fields))
    run_all(worker)
    task.refresh_from_db()
    assert task.status == Status.SUCCEEDED
    return task


# --- the task body ------------------------------------------------------------------------


def test_a_created_task_answers_201_with_every_key_of_the_task_body(alice_client):
    response = submit(alice_client, instructions="Focus on costs.")

    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response
    body = response.json()
    assert set(body) == TASK_KEYS
    task_id = body["task_id"]
    assert str(uuid.UUID(task_id)) == task_id
    assert body["status"] == "queued"
    assert body["lane"] in {"short", "long"}
    assert body["url"] == f"/tasks/{task_id}/"
    assert body["events_url"] == f"/api/tasks/{task_id}/events"
    assert body["ws_url"] == f"/ws/tasks/{task_id}/"
    assert datetime.fromisoformat(body["created_at"]).tzinfo is not None
    assert body["queue_position"] == 1
    assert body["attempts"] == []
    assert body["text_length"] == 0
    assert body["partial"] is False
    assert body["error"] is None and body["result"] is None and body["usage"] is None
    assert body["timings"] == dict.fromkeys(TIMING_KEYS)
    assert body["cost_status"] in COST_STATUSES
    assert response["Location"] == f"/api/tasks/{task_id}"
    assert alice_client.get(response["Location"]).json() == body


def test_queue_positions_count_the_tasks_ahead(alice_client, bob_client):
    first = submit(alice_client).json()
    second = submit(bob_client).json()
    third = submit(alice_client).json()
    assert [first["queue_position"], second["queue_position"], third["queue_position"]] == [
        1,
        2,
        3,
    ]
    alice_client.post(f"/api/tasks/{first['task_id']}/cancel")
    assert detail(alice_client, third["task_id"]).json()["queue_position"] == 2
    assert detail(alice_client, first["task_id"]).json()["queue_position"] is None


def test_a_task_whose_owner_is_at_the_cap_counts_after_other_users_tasks(
    alice_client, bob_client, settings
):
    settings.REPORTS_USER_MAX_RUNNING = 1
    submit(alice_client)
    claim_next_task("w")  # alice has one running: her cap while anybody else waits
    alices = [submit(alice_client).json()["task_id"] for _ in range(2)]
    bobs = submit(bob_client).json()
    assert bobs["queue_position"] == 1  # the next claim takes it, though it is the newest
    assert [detail(alice_client, t).json()["queue_position"] for t in alices] == [2, 3]

    bob_client.post(f"/api/tasks/{bobs['task_id']}/cancel")  # nobody else waits
    assert [detail(alice_client, t).json()["queue_position"] for t in alices] == [1, 2]


def test_an_upload_is_answered_from_two_reads_after_its_task_is_stored(alice_client):
    submit(alice_client)
    with CaptureQueriesContext(connection) as captured:
        body = submit(alice_client).json()

    statements = [q["sql"] for q in captured.captured_queries]
    stored = max(i for i, sql in enumerate(statements) if 'INSERT INTO "reports_document"' in sql)
    reads = [s for s in statements[stored + 1 :] if s.startswith("SELECT") and " FROM " in s]
    # the task as the database stored it, with its place in line; its attempts
    assert len(reads) == 2, reads
    assert body["status"] == "queued" and body["queue_position"] == 2


def test_a_finished_task_body_has_its_attempts_result_timings_and_usage(alice_client, worker):
    task = succeeded_task(alice_client, worker)
    body = detail(alice_client, task.pk).json()

    assert set(body) == TASK_KEYS
    assert body["status"] == "succeeded" and body["queue_position"] is None
    [attempt] = body["attempts"]
    assert set(attempt) == {
        "attempt_id",
        "number",
        "status",
        "error_type",
        "started_at",
        "ended_at",
    }
    assert attempt["number"] == 1 and attempt["status"] == "succeeded"
    assert attempt["error_type"] is None
    assert datetime.fromisoformat(attempt["started_at"]) <= datetime.fromisoformat(
        attempt["ended_at"]
    )
    assert set(body["result"]) == {"result_id", "download_url", "sha256", "bytes"}
    assert body["result"]["download_url"] == f"/api/tasks/{task.pk}/result"
    assert isinstance(body["result"]["bytes"], int) and body["result"]["bytes"] > 0
    assert body["text_length"] > 0 and body["partial"] is False
    timings = body["timings"]
    assert set(timings) == TIMING_KEYS
    assert all(
        isinstance(timings[k], int | float) for k in TIMING_KEYS - {"frontend_first_text_ms"}
    )
    assert timings["frontend_first_text_ms"] is None
    assert set(body["usage"]) == {"input_tokens", "output_tokens", "cached_tokens", "usage_source"}
    assert body["usage"]["usage_source"] in {"provider", "estimate", "missing"}
    for count in ("input_tokens", "output_tokens", "cached_tokens"):
        assert body["usage"][count] is None or isinstance(body["usage"][count], int)


def test_a_polling_client_may_ask_for_the_progress_the_event_stream_carries(alice_client):
    """`?include=progress` adds how far a plan (or an OCR, or the model's reading) has come,
    the latest `progress` of the current attempt, until the report's text arrives; the
    body without it is unchanged."""
    task = task_of(submit(alice_client))
    claim = claim_next_task("api-test-worker")
    asked = f"/api/tasks/{task.pk}?include=progress"
    assert alice_client.get(asked).json()["progress"] is None  # running, nothing said yet

    for done, label in ((0, "Reading part 1 of 3"), (1, "Reading part 2 of 3")):
        Task.objects.append_event(task.pk, claim.epoch, events.progress(done, 4, label))
    body = alice_client.get(asked).json()
    assert set(body) == TASK_KEYS | {"progress"}
    assert body["progress"] == {
        "done": 1,
        "total": 4,
        "label": "Reading part 2 of 3",
        "reading": None,
    }
    assert set(detail(alice_client, task.pk).json()) == TASK_KEYS  # not asked: as before

    Task.objects.append_event(task.pk, claim.epoch, events.delta("# Report"))
    assert alice_client.get(asked).json()["progress"] is None  # the text says it now
    assert_refused(
        alice_client.get(f"/api/tasks/{task.pk}?include=text"), 400, "invalid_request", "progress"
    )


def test_a_failed_task_shows_its_error_and_its_partial_text(alice_client, worker):
    task = task_of(submit(alice_client, scenario="error"))
    run_all(worker)
    body = detail(alice_client, task.pk).json()

    assert body["status"] == "failed"
    assert set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == "provider_error"
    assert body["error"]["message"]
    assert body["partial"] is True and body["text_length"] > 0
    assert body["result"] is None
    assert body["attempts"][-1]["error_type"] == "provider_error"


def test_a_failure_without_text_is_not_partial(alice_client, worker):
    task = task_of(submit(alice_client, scenario="empty"))
    run_all(worker)
    body = detail(alice_client, task.pk).json()
    assert body["error"]["type"] == "empty_output"
    assert body["partial"] is False and body["text_length"] == 0


# --- the list -----------------------------------------------------------------------------


def test_the_list_shows_only_the_callers_tasks_newest_first(
    alice_client, bob_client, make_task, bob
):
    mine = [make_task() for _ in range(3)]
    theirs = make_task(owner=bob)

    listed = alice_client.get("/api/tasks").json()

    assert listed["next"] is None
    assert [t["task_id"] for t in listed["tasks"]] == [str(t.pk) for t in reversed(mine)]
    assert all(set(t) == TASK_KEYS for t in listed["tasks"])
    bobs = bob_client.get("/api/tasks").json()["tasks"]
    assert [t["task_id"] for t in bobs] == [str(theirs.pk)]


def test_the_list_pages_by_50_with_a_next_link(alice_client, make_task, bob):
    made = [make_task() for _ in range(51)]
    make_task(owner=bob)

    first = alice_client.get("/api/tasks").json()
    assert len(first["tasks"]) == 50
    assert first["tasks"][0]["task_id"] == str(made[-1].pk)
    created = [datetime.fromisoformat(t["created_at"]) for t in first["tasks"]]
    assert created == sorted(created, reverse=True)
    assert first["next"]

    second = alice_client.get(first["next"]).json()
    assert [t["task_id"] for t in second["tasks"]] == [str(made[0].pk)]
    assert second["next"] is None


def test_pages_neither_repeat_nor_skip_tasks_created_in_the_same_instant(alice_client, make_task):
    made = {str(make_task().pk) for _ in range(51)}
    Task.objects.update(created_at=Task.objects.first().created_at)

    first = alice_client.get("/api/tasks").json()
    second = alice_client.get(first["next"]).json()

    listed = [t["task_id"] for t in first["tasks"] + second["tasks"]]
    assert len(listed) == 51 and set(listed) == made


def test_listing_50_tasks_of_every_kind_runs_a_fixed_number_of_queries(
    alice, alice_token, django_assert_max_num_queries
):
    tasks_of_every_kind(alice, 52)
    Task.objects.filter(owner=alice, status=Status.QUEUED).update(lane="short")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {alice_token}")

    # the token (read, last use), the page of tasks with their places in line, their
    # attempts, the text streamed so far by the running ones
    with django_assert_max_num_queries(5):
        listed = client.get("/api/tasks").json()

    bodies = listed["tasks"]
    assert len(bodies) == 50 and listed["next"]
    queued = [b for b in bodies if b["status"] == "queued"]
    # newest first: the newest queued task is the last in line
    assert [b["queue_position"] for b in queued] == list(range(len(queued) + 1, 1, -1))
    assert {b["text_length"] for b in bodies if b["status"] == "running"} == {4}
    assert {b["text_length"] for b in bodies if b["status"] == "succeeded"} == {6}
    assert all(len(b["attempts"]) == 1 for b in bodies if b["status"] != "queued")


def no_free_connection():
    raise OperationalError("connection pool exhausted: no connection within the timeout")


@pytest.mark.parametrize(
    "path",
    ["/api/tasks", pytest.param(f"/api/tasks/{uuid.uuid4()}/events", id="events"), "/"],
)
def test_a_database_that_cannot_be_reached_answers_503_json_with_retry_after(
    alice_client, monkeypatch, path
):
    monkeypatch.setattr(connection, "ensure_connection", no_free_connection)

    response = alice_client.get(path)

    assert response.status_code == 503 and int(response["Retry-After"]) > 0
    assert response["Content-Type"] == "application/json"
    assert error_of(response) == "database_unavailable"


def test_a_bad_page_number_is_400(alice_client):
    response = alice_client.get("/api/tasks?page=two")
    assert response.status_code == 400 and error_of(response) == "invalid_request"


# --- idempotency --------------------------------------------------------------------------

KEY = {"Idempotency-Key": "upload-2026-05-01-0001"}


def test_the_same_key_and_content_replays_the_original_task(alice_client):
    first = submit(alice_client, upload(), headers=KEY, instructions="Costs")
    again = submit(alice_client, upload(), headers=KEY, instructions="Costs")

    assert first.status_code == 201
    assert again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["task_id"] == first.json()["task_id"]
    assert again["Location"] == first["Location"]
    assert set(again.json()) == TASK_KEYS
    assert Task.objects.count() == 1 and Document.objects.count() == 1


def test_a_replay_shows_the_task_as_it_is_now(alice_client, worker):
    first = submit(alice_client, headers=KEY)
    run_all(worker)
    again = submit(alice_client, headers=KEY)
    assert again.status_code == 200
    assert again.json()["task_id"] == first.json()["task_id"]
    assert again.json()["status"] == "succeeded"


def test_the_key_is_bound_to_the_bytes_not_to_the_file_name(alice_client):
    first = submit(alice_client, upload("draft.md"), headers=KEY)
    again = submit(alice_client, upload("final.md"), headers=KEY)
    assert again.status_code == 200
    assert again.json()["task_id"] == first.json()["task_id"]


@pytest.mark.parametrize(
    "second",
    [
        pytest.param({"files": [upload(content=SAMPLE + "\nOne more line.")]}, id="other-bytes"),
        pytest.param({"files": [upload(), upload("b.md", "# B\n\nAnother.")]}, id="more-files"),
        pytest.param({"instructions": "Something else"}, id="other-instructions"),
        pytest.param({"scenario": "slow"}, id="other-scenario"),
    ],
)
def test_the_same_key_with_different_content_is_422(alice_client, second):
    first = submit(alice_client, upload(), headers=KEY, instructions="Costs")
    assert first.status_code == 201
    payload = {"files": [upload()], "instructions": "Costs", **second}

    response = alice_client.post("/api/tasks", payload, headers=KEY)

    assert response.status_code == 422
    assert error_of(response) == "idempotency_key_reused"
    assert Task.objects.count() == 1 and Document.objects.count() == 1


def test_files_in_another_order_are_different_content(alice_client):
    a, b = ("a.md", SAMPLE), ("b.md", "# B\n\nAnother document entirely.")
    assert submit(alice_client, upload(*a), upload(*b), headers=KEY).status_code == 201
    response = submit(alice_client, upload(*b), upload(*a), headers=KEY)
    assert response.status_code == 422


def test_another_user_with_the_same_key_gets_a_task_of_their_own(alice_client, bob_client, bob):
    alices = submit(alice_client, headers=KEY)
    bobs = submit(bob_client, headers=KEY)

    assert bobs.status_code == 201
    assert bobs.json()["task_id"] != alices.json()["task_id"]
    assert task_of(bobs).owner == bob
    assert "Idempotent-Replayed" not in bobs


@pytest.mark.django_db(transaction=True)
def test_concurrent_duplicates_make_exactly_one_task(alice):
    clients = []
    for _ in range(6):
        client = Client()
        client.force_login(alice)
        clients.append(client)
    barrier = threading.Barrier(len(clients))
    responses = [None] * len(clients)

    def post(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            responses[i] = submit(clients[i], upload(), headers=KEY)
        finally:
            connection.close()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    statuses = sorted(r.status_code for r in responses)
    assert statuses.count(201) == 1, statuses
    assert set(statuses) <= {200, 201, 409}, statuses
    assert len({r.json()["task_id"] for r in responses if r.status_code in (200, 201)}) == 1
    assert Task.objects.count() == 1
    assert Document.objects.count() == 1
    assert stored_files("uploads") == [Document.objects.get().storage_name]


# --- ownership and not-found --------------------------------------------------------------


def route_calls(task_id):
    """Every task route of docs/api.md, as (label, method, path, json body)."""
    return [
        ("detail", "get", f"/api/tasks/{task_id}", None),
        ("events", "get", f"/api/tasks/{task_id}/events", None),
        ("cancel", "post", f"/api/tasks/{task_id}/cancel", None),
        ("result", "get", f"/api/tasks/{task_id}/result", None),
        ("timing", "post", f"/api/tasks/{task_id}/timing", {"frontend_first_text_ms": 10}),
    ]


def call(client, method, path, body, **extra):
    if body is None:
        return getattr(client, method)(path, **extra)
    return getattr(client, method)(path, body, content_type="application/json", **extra)


def test_another_users_task_is_answered_exactly_as_a_missing_one(alice_client, bob_client, worker):
    task = succeeded_task(alice_client, worker)
    for (label, method, path, body), (_, _, missing, _), (_, _, garbage, _) in zip(
        route_calls(task.pk),
        route_calls(uuid.uuid4()),
        route_calls("not-a-uuid"),
        strict=True,
    ):
        foreign = call(bob_client, method, path, body)
        absent = call(bob_client, method, missing, body)
        malformed = call(bob_client, method, garbage, body)
        assert foreign.status_code == absent.status_code == malformed.status_code == 404, label
        assert foreign.content == absent.content == malformed.content, label
        assert foreign["Content-Type"] == absent["Content-Type"] == "application/json"
        assert error_of(foreign) == "not_found"
    task.refresh_from_db()
    assert task.status == "succeeded" and task.frontend_first_text_ms is None


def test_another_user_cannot_cancel_a_queued_task(alice_client, bob_client, make_task):
    task = make_task()
    assert bob_client.post(f"/api/tasks/{task.pk}/cancel").status_code == 404
    task.refresh_from_db()
    assert task.status == "queued" and task.cancel_requested_at is None


def test_a_foreign_stream_is_404_before_its_resume_point_is_looked_at(bob_client, make_task):
    task = make_task()
    response = bob_client.get(f"/api/tasks/{task.pk}/events?after=abc")
    assert response.status_code == 404 and error_of(response) == "not_found"


# --- authentication -----------------------------------------------------------------------


def all_routes(task_id):
    return [
        ("list", "get", "/api/tasks", None),
        ("create", "post", "/api/tasks", None),
        *route_calls(task_id),
    ]


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer rl_not-a-real-token", "Bearer ", "Basic YWxpY2U6YWxpY2UtcGFzcw=="],
)
def test_a_caller_without_valid_credentials_gets_401_on_every_route(make_task, authorization):
    task = make_task()
    client = Client()
    headers = {"Authorization": authorization} if authorization else {}
    for label, method, path, body in all_routes(task.pk):
        if label == "create":
            response = client.post(path, {"files": [upload()]}, headers=headers)
        else:
            response = call(client, method, path, body, headers=headers)
        assert response.status_code == 401, label
        assert error_of(response) == "unauthenticated", label
        assert response["WWW-Authenticate"] == "Bearer", label
    assert Task.objects.count() == 1


def test_a_bad_token_is_refused_even_with_a_valid_session(alice_client):
    response = alice_client.get("/api/tasks", headers={"Authorization": "Bearer rl_wrong"})
    assert response.status_code == 401
    assert error_of(response) == "unauthenticated"


def test_an_issued_token_is_printed_alone_on_the_last_line_and_works_without_csrf(alice, make_task):
    out = io.StringIO()
    call_command("issue_token", "alice", stdout=out)
    token = out.getvalue().rstrip("\n").splitlines()[-1]
    assert token == token.strip() and " " not in token and len(token) >= 32

    client = Client(enforce_csrf_checks=True)
    auth = {"Authorization": f"Bearer {token}"}
    created = client.post("/api/tasks", {"files": [upload()]}, headers=auth)
    assert created.status_code == 201
    assert task_of(created).owner == alice
    other = make_task()
    assert client.post(f"/api/tasks/{other.pk}/cancel", headers=auth).status_code == 202
    timing = client.post(
        f"/api/tasks/{task_of(created).pk}/timing",
        {"frontend_first_text_ms": 5},
        content_type="application/json",
        headers=auth,
    )
    assert timing.status_code == 204
    assert len(client.get("/api/tasks", headers=auth).json()["tasks"]) == 2


def test_issue_token_for_an_unknown_user_fails():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="nobody"):
        call_command("issue_token", "nobody", stdout=io.StringIO())


def test_a_session_post_without_the_csrf_token_is_refused(alice, make_task):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    task = make_task()

    created = client.post("/api/tasks", {"files": [upload()]})
    cancelled = client.post(f"/api/tasks/{task.pk}/cancel")
    timing = client.post(
        f"/api/tasks/{task.pk}/timing", {"frontend_first_text_ms": 5}, "application/json"
    )

    for response in (created, cancelled, timing):
        assert response.status_code == 403
        assert error_of(response) == "csrf_failed"
    task.refresh_from_db()
    assert Task.objects.count() == 1
    assert task.status == "queued" and task.frontend_first_text_ms is None
    assert client.get("/api/tasks").status_code == 200  # reading needs no token


def test_a_session_post_with_the_csrf_token_is_accepted(alice):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    secret = get_random_string(32)
    client.cookies["csrftoken"] = secret

    response = client.post("/api/tasks", {"files": [upload()]}, headers={"X-CSRFToken": secret})

    assert response.status_code == 201


def test_a_timing_report_sent_as_a_form_by_a_session_is_400_not_a_crash(alice, make_task):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    secret = get_random_string(32)
    client.cookies["csrftoken"] = secret
    task = make_task()
    response = client.post(
        f"/api/tasks/{task.pk}/timing",
        {"frontend_first_text_ms": "5"},
        headers={"X-CSRFToken": secret},
    )
    assert response.status_code == 400 and error_of(response) == "invalid_request"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("put", "/api/tasks", "GET, POST"),
        ("delete", "/api/tasks/{id}", "GET"),
        ("post", "/api/tasks/{id}", "GET"),
        ("get", "/api/tasks/{id}/cancel", "POST"),
        ("post", "/api/tasks/{id}/result", "GET"),
        ("get", "/api/tasks/{id}/timing", "POST"),
        ("post", "/api/tasks/{id}/events", "GET"),
    ],
)
def test_a_wrong_method_is_405_in_json(alice_client, make_task, method, path, allowed):
    task = make_task()
    response = getattr(alice_client, method)(path.format(id=task.pk))
    assert response.status_code == 405
    assert error_of(response) == "method_not_allowed"
    assert response["Allow"] == allowed
    task.refresh_from_db()
    assert task.status == "queued"


def test_every_error_code_the_api_answers_is_in_its_docs():
    """A script handles the codes docs/api.md names: the API answers no other."""
    reports = Path(__file__).resolve().parent.parent / "reports"
    error = re.compile(r'(?:ApiError|json_error)\(\s*\d+,\s*"([a-z_]+)"')
    codes = {
        code
        for source in reports.rglob("*.py")
        if "observability" not in source.parts  # /metrics: docs/observability.md
        for code in error.findall(source.read_text())
    }
    docs = (reports.parent / "docs" / "api.md").read_text()
    assert "not_found" in codes and "csrf_failed" in codes
    assert sorted(code for code in codes if f"`{code}`" not in docs) == []


# --- download, timing, cancel -------------------------------------------------------------


def test_the_result_downloads_as_an_attachment_matching_its_checksum(alice_client, worker):
    task = succeeded_task(alice_client, worker)
    body = detail(alice_client, task.pk).json()

    response = alice_client.get(body["result"]["download_url"])

    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment")
    assert 'filename="article-report.md"' in response["Content-Disposition"]  # the document's name
    assert response["Content-Type"].startswith("text/markdown")
    content = response.content
    assert content == saved_report(task).encode()
    assert hashlib.sha256(content).hexdigest() == body["result"]["sha256"]
    assert len(content) == body["result"]["bytes"]
    assert content.decode().startswith("# ")


@pytest.mark.parametrize("scenario", ["ok", "error"])
def test_the_result_is_404_until_the_task_succeeded(alice_client, worker, scenario):
    task = task_of(submit(alice_client, scenario=scenario))
    queued = alice_client.get(f"/api/tasks/{task.pk}/result")
    assert_refused(queued, 404, "not_found", "not ready yet", "queued")
    run_all(worker)
    ended = alice_client.get(f"/api/tasks/{task.pk}/result")
    if scenario == "ok":
        assert ended.status_code == 200
    else:  # a report that will never come is not said to be on its way
        assert_refused(ended, 404, "not_found", "no report", "ended failed")


def timing(client, task, payload, content_type="application/json"):
    return client.post(f"/api/tasks/{task.pk}/timing", payload, content_type=content_type)


def test_the_first_timing_report_wins_and_later_ones_are_ignored(alice_client, make_task):
    task = make_task()
    assert timing(alice_client, task, {"frontend_first_text_ms": 123.5}).status_code == 204
    assert timing(alice_client, task, {"frontend_first_text_ms": 9}).status_code == 204
    found = detail(alice_client, task.pk).json()["timings"]["frontend_first_text_ms"]
    assert found == 123.5


def test_a_timing_of_zero_is_a_valid_first_report(alice_client, make_task):
    task = make_task()
    assert timing(alice_client, task, {"frontend_first_text_ms": 0}).status_code == 204
    assert detail(alice_client, task.pk).json()["timings"]["frontend_first_text_ms"] == 0


@pytest.mark.parametrize(
    "raw",
    [
        '{"frontend_first_text_ms": -1}',
        '{"frontend_first_text_ms": "120"}',
        "{}",
        '{"frontend_first_text_ms": NaN}',
        '{"frontend_first_text_ms": Infinity}',
        '{"frontend_first_text_ms": true}',
        '{"frontend_first_text_ms": null}',
        '{"frontend_first_text_ms": [5]}',
        "[5]",
        "120",
        "not json",
        "",
    ],
)
def test_a_timing_that_is_not_a_non_negative_number_is_400(alice_client, make_task, raw):
    task = make_task()
    response = timing(alice_client, task, raw)
    assert response.status_code == 400
    assert error_of(response) == "invalid_request"
    task.refresh_from_db()
    assert task.frontend_first_text_ms is None
    # a bad report does not use up the first report
    assert timing(alice_client, task, {"frontend_first_text_ms": 7}).status_code == 204
    task.refresh_from_db()
    assert task.frontend_first_text_ms == 7


def test_cancel_of_a_queued_task_is_202_and_idempotent(alice_client, make_task):
    task = make_task()
    first = alice_client.post(f"/api/tasks/{task.pk}/cancel")
    again = alice_client.post(f"/api/tasks/{task.pk}/cancel")
    assert first.status_code == again.status_code == 202
    assert first.json()["status"] == again.json()["status"] == "cancelled"
    assert set(first.json()) == TASK_KEYS
    assert first.json()["partial"] is False


@pytest.mark.parametrize(("scenario", "status"), [("ok", "succeeded"), ("error", "failed")])
def test_cancel_of_a_task_that_ended_otherwise_is_409(alice_client, worker, scenario, status):
    task = task_of(submit(alice_client, scenario=scenario))
    run_all(worker)
    response = alice_client.post(f"/api/tasks/{task.pk}/cancel")
    assert response.status_code == 409
    assert error_of(response) == "task_finished"
    assert status in response.json()["error"]["message"]
    assert detail(alice_client, task.pk).json()["status"] == status


# --- source passages ---------------------------------------------------------------------


def test_a_source_passage_answers_as_json(alice_client, make_task):
    task = make_task()
    # Text before the first heading stands under no section: its `section` is null.
    cut = store_passages(task, "A preface that stands before any heading.\n\n" + SAMPLE)
    for passage in cut:
        response = alice_client.get(f"/api/tasks/{task.pk}/sources/{passage.id}")
        assert response.status_code == 200
        assert "no-store" in response["Cache-Control"]
        assert response.json() == {
            "id": passage.id,
            "document": "doc.md",
            "section": passage.section,
            "page": None,
            "text": passage.text,
        }
    assert any(p.section is None for p in cut) and any(p.section for p in cut)


@pytest.mark.parametrize("passage_id", ["S999", "S0", "s1", "S1a", "%E3%80%90S1", "S" + "9" * 30])
def test_an_unknown_passage_is_404_and_says_the_passage_is_what_is_missing(
    alice_client, make_task, passage_id
):
    task = make_task()
    store_passages(task)
    missing = alice_client.get(f"/api/tasks/{uuid.uuid4()}/sources/S1")
    response = alice_client.get(f"/api/tasks/{task.pk}/sources/{passage_id}")
    assert response.status_code == missing.status_code == 404
    assert error_of(response) == error_of(missing) == "not_found"
    # The owner is told which: the task is theirs, the passage is not in it.
    assert response.json()["error"]["message"] == "This task has no such passage."
    assert missing.json()["error"]["message"] == "No such task."


def test_a_source_passage_is_the_owners_alone(bob_client, client, make_task):
    task = make_task()
    store_passages(task)
    missing = bob_client.get(f"/api/tasks/{uuid.uuid4()}/sources/S1")
    response = bob_client.get(f"/api/tasks/{task.pk}/sources/S1")
    assert response.status_code == 404 and response.content == missing.content
    anonymous = client.get(f"/api/tasks/{task.pk}/sources/S1")
    assert anonymous.status_code == 401


@pytest.mark.parametrize(
    "path", ["/api", "/api/", "/api/nonexistent", "/api/tasks/", "/api/tasks/x/y/z"]
)
def test_an_address_the_api_does_not_serve_answers_its_json_404(alice_client, path):
    response = alice_client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert error_of(response) == "not_found"


def test_a_page_address_nothing_serves_still_answers_the_products_page(alice_client):
    response = alice_client.get("/no/such/page/")
    assert response.status_code == 404
    assert b'data-error-page="404"' in response.content
