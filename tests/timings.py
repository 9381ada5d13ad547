"""Tasks with known timings, written straight into the rows (as a worker would have)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from reports.models import Attempt, Task
from tests.helpers import make_submission

# Two attempts of one task: a 429 after 0.3 s, then a success from 2.3 s to 3.2 s.
RETRIED = [
    {
        "status": "retry_scheduled",
        "error_type": "rate_limited",
        "start_s": 0.1,
        "end_s": 0.3,
        "stage_ms": {"parse": 2.0, "prepare": 1.0, "generate": 150.0},
    },
    {
        "status": "succeeded",
        "start_s": 2.3,
        "end_s": 3.2,
        "first_text_ms": 400.0,
        "stage_ms": {
            "parse": 2.0,
            "prepare": 1.0,
            "generate": 800.0,
            "validate": 1.0,
            "render": 3.0,
            "save": 2.0,
        },
    },
]


def ended_task(
    owner,
    *,
    status: str = "succeeded",
    queue_s: float | None = 0.2,
    first_text_s: float | None = 0.5,
    total_s: float | None = 2.0,
    error_type: str = "",
    lane: str = "short",
    age: timedelta = timedelta(minutes=5),
    frontend_first_text_ms: float | None = None,
    attempts: list[dict] | None = None,
) -> Task:
    """Create a task that was submitted `age` ago and took the given times.

    `attempts`: dicts of Attempt fields with `start_s`/`end_s` from submit; by default one
    attempt from the claim to the end with a 1 ms parse and prepare and a generate stage.
    """
    task = make_submission(owner)
    created = timezone.now() - age

    def at(seconds):
        return None if seconds is None else created + timedelta(seconds=seconds)

    Task.objects.filter(pk=task.pk).update(
        status=status,
        lane=lane,
        error_type=error_type,
        created_at=created,
        claimed_at=at(queue_s),
        first_text_at=at(first_text_s),
        finished_at=at(total_s),
        frontend_first_text_ms=frontend_first_text_ms,
        attempt_count=len(attempts) if attempts is not None else (1 if queue_s is not None else 0),
    )
    if attempts is None and queue_s is not None:
        generate = max(0.0, (total_s or queue_s) - queue_s - 0.002) * 1000
        attempts = [
            {
                "status": status,
                "error_type": error_type,
                "start_s": queue_s,
                "end_s": total_s,
                "stage_ms": {"parse": 1.0, "prepare": 1.0, "generate": round(generate, 1)},
                "first_text_ms": None
                if first_text_s is None
                else round((first_text_s - queue_s) * 1000, 1),
            }
        ]
    for number, spec in enumerate(attempts or [], start=1):
        spec = dict(spec)
        Attempt.objects.create(
            task_id=task.pk,
            number=number,
            epoch=number,
            started_at=at(spec.pop("start_s")),
            ended_at=at(spec.pop("end_s")),
            **spec,
        )
    task.refresh_from_db()
    return task
