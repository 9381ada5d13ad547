"""Write the chunks of every attempt running in this process together.

Each chunk is still a fenced append (renew the lease, take the next seq, insert the
event), but the chunks that become ready while the previous write is in progress go to
the database together (`TaskQuerySet.append_events`): one statement on PostgreSQL, one
transaction of two statements on SQLite, on the worker's own thread (reports/threads.py),
so page reads on the shared database thread never hold them up. With 100 streams the
worker makes a few dozen commits a second instead of several hundred, and a runner no
longer waits behind a queue of single-chunk transactions (docs/benchmarks.md, benchmark 2).

Fencing is per chunk, as before: a chunk whose lease was lost gets None and writes
nothing; the others in the same batch are unaffected.
"""

from __future__ import annotations

import asyncio
import weakref

from reports import threads
from reports.events import Draft, Event
from reports.models import Task

_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


async def append_event(
    task_id, epoch: int, event: Draft, *, first_text: bool = False
) -> tuple[Event, bool] | None:
    """`Task.objects.append_event`, committed together with the chunks ready beside it."""
    loop = asyncio.get_running_loop()
    writer = _writers.get(loop)
    if writer is None:
        writer = _writers[loop] = _Writer()
    return await writer.append((task_id, epoch, event), first_text)


class _Writer:
    def __init__(self) -> None:
        self.waiting: list[tuple[tuple, bool, asyncio.Future]] = []
        self.writing: asyncio.Task | None = None

    async def append(self, append: tuple, first_text: bool):
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((append, first_text, future))
        if self.writing is None:
            self.writing = asyncio.create_task(self._write_batches())
        return await future

    def _next_batch(self) -> list[tuple[tuple, bool, asyncio.Future]]:
        """Take the waiting appends that can go together: of one kind (text or not), one
        per task."""
        first_text = self.waiting[0][1]
        batch, rest, tasks = [], [], set()
        for item in self.waiting:
            task_id = str(item[0][0])
            if item[1] == first_text and task_id not in tasks:
                tasks.add(task_id)
                batch.append(item)
            else:
                rest.append(item)
        self.waiting = rest
        return batch

    async def _write_batches(self) -> None:
        try:
            while self.waiting:
                batch = self._next_batch()
                appends = [append for append, _, _ in batch]
                try:
                    write = threads.on_worker_thread(Task.objects.append_events, streaming=True)
                    results = await write(appends, first_text=batch[0][1])
                except Exception as exc:
                    results = [exc] * len(batch)
                for (_, _, future), result in zip(batch, results, strict=True):
                    if future.done():  # its runner was cancelled meanwhile
                        continue
                    if isinstance(result, Exception):
                        future.set_exception(result)
                    else:
                        future.set_result(result)
        finally:
            self.writing = None
