"""Measure one report's chain on this machine: latency of the simulated `ok` scenario
(submit → first text → saved result, real clock) and the database writes one report
of about 5,000 words costs (coalesced events, fenced heartbeats, the final writes).

Run: .venv/bin/python bench/chain.py   (uses a throwaway SQLite database)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only")
os.environ["REPORTS_DATA_DIR"] = tempfile.mkdtemp(prefix="reportline-bench-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

import django

django.setup()

from asgiref.sync import async_to_sync  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db.backends.utils import CursorWrapper  # noqa: E402

from reports import submissions  # noqa: E402
from reports.clock import FakeClock  # noqa: E402
from reports.models import Task, TaskEvent  # noqa: E402
from reports.providers.base import Completed, Provider, TextDelta, Usage  # noqa: E402
from reports.worker.supervisor import Supervisor  # noqa: E402

SAMPLE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "sample_article.md"


def new_task(user, scenario: str = "ok") -> Task:
    upload = submissions.Upload("article.md", ".md", SAMPLE.read_bytes())
    task, _ = submissions.submit(user, submissions.Submission((upload,), "", scenario, None))
    return task


def run(worker: Supervisor) -> None:
    async def go():
        while await worker.claim_and_start():
            pass
        await worker.wait_for_attempts()

    async_to_sync(go)()


class FiveThousandWords(Provider):
    """OpenAI-like pacing: ~4-character tokens every ~15 ms, 5,000 words in all, none
    repeated (a text that repeats itself is stopped as a loop, reports/worker/loops.py)."""

    name = "bench"

    async def stream(self, request):
        words = ["# Long report\n\n## Summary\n\n"] + [f"word{i} " for i in range(5000)]
        words.insert(2000, "\n\n## Details\n\n")
        for word in words:
            yield TextDelta(word)
            await self.clock.sleep(0.015 * max(1, len(word) // 4))
        yield Completed("stop", Usage(100, 7500, None, "provider"))


def count_writes(fn) -> dict[str, int]:
    """Run `fn`, counting the statements by their verb on every thread's connection: the
    chunks are written on the worker's own thread, with a connection of its own."""
    counts = {"INSERT": 0, "UPDATE": 0, "DELETE": 0}
    execute = CursorWrapper._execute

    def counted(self, sql, *args, **kwargs):
        verb = sql.lstrip().split(" ", 1)[0].upper()
        if verb in counts:
            counts[verb] += 1
        return execute(self, sql, *args, **kwargs)

    CursorWrapper._execute = counted
    try:
        fn()
    finally:
        CursorWrapper._execute = execute
    return counts


def main() -> None:
    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user("bench")

    latencies = []
    for _ in range(5):
        task = new_task(user)
        run(Supervisor(slots=1))
        task.refresh_from_db()
        assert task.status == "succeeded", task.status
        latencies.append((task.queue_ms, task.first_text_ms, task.duration_ms))
    print("simulated `ok` scenario, default speed (TTFT 0.45 s, 60 tokens/s), 5 runs:")
    for name, i in (("queue", 0), ("first text", 1), ("saved result", 2)):
        values = [row[i] for row in latencies]
        print(
            f"  submit → {name:12s} median {statistics.median(values):7.0f} ms"
            f"  (min {min(values):.0f}, max {max(values):.0f})"
        )

    clock = FakeClock()
    task = new_task(user)
    worker = Supervisor(slots=1, clock=clock, provider=FiveThousandWords(clock=clock))
    writes = count_writes(lambda: run(worker))
    task.refresh_from_db()
    assert task.status == "succeeded", task.status
    text = task.attempts.get().text
    events = TaskEvent.objects.filter(task=task).count()
    print(f"one report of {len(text.split())} words ({len(text)} characters), {task.status}:")
    print(
        f"  {events} events ({events - 3} delta chunks), "
        f"{writes['INSERT']} inserts, {writes['UPDATE']} updates, {writes['DELETE']} deletes"
    )


if __name__ == "__main__":
    main()
