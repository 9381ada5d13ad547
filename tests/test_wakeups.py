"""A worker in another process hears of a new task at once on PostgreSQL, not at its next poll."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from reports.models import Task
from reports.worker.supervisor import Supervisor

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_new_task_wakes_an_idle_worker_through_listen_notify(make_task, clock):
    if connection.vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's; SQLite runs the embedded worker")
    worker = Supervisor(slots=1, clock=clock, poll_s=3600)  # polling alone would wait an hour
    running = asyncio.create_task(worker.run_forever())
    try:
        await asyncio.wait_for(worker.listening.wait(), timeout=30)
        await asyncio.wait_for(worker.idle.wait(), timeout=30)  # its look after LISTEN is done
        task = await sync_to_async(make_task)()
        await asyncio.wait_for(_until_claimed(task), timeout=30)
    finally:
        await worker.shutdown()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def _until_claimed(task: Task) -> None:
    still_queued = sync_to_async(Task.objects.filter(pk=task.pk, status="queued").exists)
    while await still_queued():  # noqa: ASYNC110 - the claim is another task's database write
        await asyncio.sleep(0.01)
