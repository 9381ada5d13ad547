"""Concurrent submissions against one budget, each over its own connection, through the
real submit path: the budget is never overspent and no reservation is left behind."""

import threading

import pytest
from django.db import connection
from django.test import Client

from reports import budgets
from reports.models import Budget, Document, Task
from tests.helpers import SAMPLE, run_all, submit, upload

pytestmark = pytest.mark.django_db(transaction=True)

SUBMITTERS = 20
FITS = 7


def submit_concurrently(user) -> list[int]:
    """POST /api/tasks from SUBMITTERS threads at once; return their status codes."""
    barrier = threading.Barrier(SUBMITTERS)
    codes, errors = [], []

    def post() -> None:
        try:
            client = Client()
            client.force_login(user)
            barrier.wait()
            codes.append(submit(client, upload("harbours.md", SAMPLE)).status_code)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=post) for _ in range(SUBMITTERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return codes


class Watcher:
    """Read the budget over and over, on its own connection, while the submitters run."""

    def __init__(self, user) -> None:
        self.user, self.readings, self.stop = user, [], threading.Event()
        self.thread = threading.Thread(target=self._watch)

    def _watch(self) -> None:
        try:
            while not self.stop.is_set():
                self.readings.extend(
                    Budget.objects.filter(user=self.user).values_list(
                        "limit_micros", "spent_micros", "reserved_micros"
                    )
                )
        finally:
            connection.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


@pytest.mark.parametrize("first_use", [False, True], ids=["existing-budget", "first-use"])
def test_a_budget_that_fits_k_reservations_accepts_exactly_k(alice, settings, worker, first_use):
    settings.REPORTS_QUEUE_LIMIT = 1_000
    each = budgets.reservation(settings.REPORTS_MODEL, len(SAMPLE.encode()), "")
    limit = FITS * each + each - 1  # room for FITS reservations, not one more
    settings.REPORTS_DEFAULT_BUDGET_MICROS = limit
    if not first_use:  # else the submitters race to create it too
        budgets.budget_of(alice)

    with Watcher(alice) as watcher:
        codes = submit_concurrently(alice)

    assert sorted(codes) == [201] * FITS + [402] * (SUBMITTERS - FITS)
    assert len(watcher.readings) > SUBMITTERS  # it saw the budget all along
    assert all(spent + reserved <= cap for cap, spent, reserved in watcher.readings)
    assert Task.objects.count() == FITS
    assert Document.objects.count() == FITS  # a refused submission left nothing behind
    assert Budget.objects.get(user=alice).reserved_micros == FITS * each

    run_all(worker)

    tasks = list(Task.objects.all())
    assert {(t.status, t.cost_status, t.reserved_micros) for t in tasks} == {
        ("succeeded", "settled", 0)
    }
    budget = Budget.objects.get(user=alice)
    assert budget.reserved_micros == 0  # nothing leaked
    assert budget.spent_micros == sum(t.cost_micros for t in tasks) > 0
