"""Fixtures of the security tests."""

from __future__ import annotations

import pytest

from reports.models import Task
from tests.helpers import run_all, submit, task_of


@pytest.fixture
def finished_task(alice_client, worker) -> Task:
    """Alice's task, run to success."""
    response = submit(alice_client)
    run_all(worker)
    return task_of(response)
