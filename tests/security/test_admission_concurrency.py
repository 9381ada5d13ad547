"""Parallel creations against the per-user rate, a user's share of the queue and the global
queue limit: the checks and the insert are one step, so no limit is overrun, however many
requests race (docs/security.md). Each request runs over its own database connection; on PostgreSQL
(DATABASE_URL) they really run at once."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from django.db import connection
from django.test import Client

from reports.models import Document, Status, Task
from tests.helpers import submit, upload

pytestmark = pytest.mark.django_db(transaction=True)

CREATIONS = 100
# Five creations a thread: every thread holds a connection of the process's pool while it
# waits for the admission lock, and the suite's pool lends 40 (tests/settings.py).
THREADS = 20


def create_in_parallel(user) -> Counter:
    """POST /api/tasks CREATIONS times from THREADS threads released at once."""
    barrier = threading.Barrier(THREADS)
    answers: Counter = Counter()
    errors: list[Exception] = []
    lock = threading.Lock()

    def post(thread: int) -> None:
        try:
            client = Client()
            client.force_login(user)
            barrier.wait()
            for n in range(CREATIONS // THREADS):
                response = submit(client, upload(f"doc-{thread}-{n}.md"))
                code = (response.json()["error"] or {}).get("code", response.status_code)
                with lock:
                    answers[code] += 1
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return answers


def test_parallel_creations_by_one_user_stop_at_the_user_rate(alice, settings):
    settings.REPORTS_USER_RATE_LIMIT = 30
    settings.REPORTS_USER_RATE_WINDOW_S = 600
    settings.REPORTS_QUEUE_LIMIT = 1_000
    settings.REPORTS_USER_QUEUE_LIMIT = 1_000

    answers = create_in_parallel(alice)

    assert answers == {201: 30, "rate_limited": CREATIONS - 30}
    assert Task.objects.count() == 30
    assert Document.objects.count() == 30  # a refused creation left nothing behind


@pytest.mark.parametrize(
    ("queue_limit", "user_queue_limit", "refused"),
    [(25, 10_000, "queue_full"), (1_000, 12, "rate_limited")],
    ids=["the-queue", "one-users-share"],
)
def test_parallel_creations_never_fill_the_queue_past_its_limits(
    alice, settings, queue_limit, user_queue_limit, refused
):
    settings.REPORTS_USER_RATE_LIMIT = 10_000
    settings.REPORTS_QUEUE_LIMIT = queue_limit
    settings.REPORTS_USER_QUEUE_LIMIT = user_queue_limit
    admitted = min(queue_limit, user_queue_limit)

    answers = create_in_parallel(alice)

    assert answers == {201: admitted, refused: CREATIONS - admitted}
    assert Task.objects.filter(status=Status.QUEUED).count() == admitted
