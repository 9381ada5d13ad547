"""A lease held by a worker known dead on this host is reaped at once, not after its expiry."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from reports.models import Attempt, Task
from reports.worker import identity
from reports.worker.leases import claim_next_task, reap_expired_leases

pytestmark = pytest.mark.skipif(not identity.place(), reason="needs Linux's /proc")


def worker_id_of(pid: int, started: str) -> str:
    return f"{identity.host()}:{pid}:abcdef:{identity.place()}.{started}"


def test_a_worker_whose_process_ended_is_known_dead():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        worker_id = worker_id_of(child.pid, identity.start_time(child.pid))
        assert not identity.known_dead(worker_id)
    finally:
        child.kill()
        child.wait()
    assert identity.known_dead(worker_id)


def test_a_killed_worker_not_yet_collected_by_its_parent_is_known_dead():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    worker_id = worker_id_of(child.pid, identity.start_time(child.pid))
    child.kill()
    try:
        deadline = time.monotonic() + 10  # the kernel ends it at once; bounded all the same
        while not identity.known_dead(worker_id) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert identity.known_dead(worker_id)  # a zombie until wait() below
    finally:
        child.wait()


def test_a_reused_pid_does_not_pass_for_the_worker_that_had_it():
    assert identity.known_dead(worker_id_of(os.getpid(), "1"))  # another start time
    assert not identity.known_dead(identity.new_worker_id())  # this very process


@pytest.mark.parametrize(
    "worker_id",
    [
        "elsewhere:1:abcdef:{place}.1",  # another host: nothing is known there
        "{host}:1:abcdef:0badc0de.1",  # another boot or PID namespace (a container)
        "{host}:1:abcdef",  # an id from before start times were recorded
        "test-worker",
    ],
)
def test_nothing_is_known_of_a_worker_elsewhere(worker_id):
    worker_id = worker_id.format(host=identity.host(), place=identity.place())
    assert not identity.known_dead(worker_id)


@pytest.mark.django_db
def test_the_reaper_takes_a_live_lease_of_a_dead_worker_at_once(make_task):
    dead, alive = make_task(), make_task()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    claim_next_task(worker_id_of(child.pid, "1"))
    claim_next_task(identity.new_worker_id())

    assert len(reap_expired_leases()) == 1  # neither lease has expired

    assert Task.objects.get(pk=dead.pk).status == "queued"
    assert Attempt.objects.get(task=dead).error_type == "worker_lost"
    assert Task.objects.get(pk=alive.pk).status == "running"
