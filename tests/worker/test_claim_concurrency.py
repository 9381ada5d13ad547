"""Concurrent claimers, each with its own database connection, against the real database."""

from collections import Counter

import pytest

from reports.models import Task
from tests.helpers import claim_concurrently

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_claimers_never_exceed_the_caps_nor_claim_twice(make_task, settings):
    settings.REPORTS_MAX_RUNNING = 3
    settings.REPORTS_LANE_LIMITS = {"short": 3, "long": 1}
    tasks = [make_task() for _ in range(30)]
    every_claim = []
    for _ in range(10):  # rounds: free the slots in between, as finished attempts would
        claims = claim_concurrently(6)
        assert len(claims) == 3
        assert Task.objects.live_leases().count() == 3
        every_claim.extend(claims)
        Task.objects.filter(pk__in=[c.task_id for c in claims]).update(status="succeeded")
    claimed = Counter(c.task_id for c in every_claim)
    assert max(claimed.values()) == 1
    assert set(claimed) == {t.pk for t in tasks}
