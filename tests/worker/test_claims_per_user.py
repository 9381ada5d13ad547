"""One user's backlog and everyone else's: REPORTS_USER_MAX_RUNNING, counted from live
leases inside the claim (docs/architecture.md, "Decisions")."""

from collections import Counter

import pytest

from reports.models import Status, Task
from reports.worker.leases import claim_next_task
from tests.helpers import claim_concurrently


def finish(claim) -> None:
    """End a claimed task, as its attempt's end would: its slot is free again."""
    Task.objects.filter(pk=claim.task_id).update(status=Status.SUCCEEDED, lease_expires_at=None)


def owner_of(claim):
    return Task.objects.get(pk=claim.task_id).owner


@pytest.fixture
def four_slots(settings):
    settings.REPORTS_MAX_RUNNING = 4
    settings.REPORTS_LANE_LIMITS = {"short": 4, "long": 1}
    settings.REPORTS_USER_MAX_RUNNING = 2


@pytest.mark.django_db
def test_one_user_alone_takes_every_slot(make_task, four_slots):
    backlog = [make_task() for _ in range(6)]
    claims = [claim_next_task("w") for _ in range(5)]
    assert [c.task_id for c in claims[:4]] == [t.pk for t in backlog[:4]]  # oldest first
    assert claims[4] is None  # the slots are full, not the user's share


@pytest.mark.django_db
def test_another_users_task_takes_the_next_free_slot_before_the_first_users_backlog(
    make_task, alice, bob, four_slots
):
    backlog = [make_task() for _ in range(10)]
    running = [claim_next_task("w") for _ in range(4)]
    bobs = make_task(owner=bob)
    assert claim_next_task("w") is None  # no slot is free yet

    finish(running[0])  # alice still has 3 running, over her 2 while bob waits
    assert claim_next_task("w").task_id == bobs.pk

    # Nobody else waits now: alice's backlog takes the next slot, oldest first.
    finish(running[1])
    assert claim_next_task("w").task_id == backlog[4].pk


@pytest.mark.django_db
def test_under_the_cap_the_oldest_task_goes_first_whoever_owns_it(
    make_task, alice, bob, four_slots
):
    alices = make_task()
    claim_next_task("w")  # alice has 1 running, under her 2
    older, newer = make_task(), make_task(owner=bob)
    assert claim_next_task("w").task_id == older.pk
    assert claim_next_task("w").task_id == newer.pk  # alice is at 2 now
    assert Task.objects.get(pk=alices.pk).status == Status.RUNNING


@pytest.mark.django_db
def test_another_users_task_that_cannot_take_the_slot_does_not_hold_it_back(
    make_task, bob, settings, four_slots
):
    settings.REPORTS_LONG_LANE_BYTES = 1000
    long_text = "# Long\n\n" + "words and more words. " * 100
    make_task(owner=bob, content=long_text)
    assert owner_of(claim_next_task("w")) == bob  # the long lane's one slot
    backlog = [make_task() for _ in range(3)]
    make_task(owner=bob, content=long_text)  # waits for the long lane, which is full
    claims = [claim_next_task("w") for _ in range(3)]
    assert [c.task_id for c in claims] == [t.pk for t in backlog]  # short slots: alice's


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_hold_every_users_cap(make_task, alice, bob, settings):
    settings.REPORTS_MAX_RUNNING = 6
    settings.REPORTS_LANE_LIMITS = {"short": 6, "long": 1}
    settings.REPORTS_USER_MAX_RUNNING = 2
    carol = type(alice).objects.create_user("carol")
    for owner in (alice, bob, carol):  # alice's backlog is the oldest, carol's the newest
        for _ in range(8):
            make_task(owner=owner)

    claims = claim_concurrently(10)

    assert Counter(owner_of(c).username for c in claims) == {"alice": 2, "bob": 2, "carol": 2}
    assert Task.objects.live_leases().count() == 6
    assert len({c.task_id for c in claims}) == 6
