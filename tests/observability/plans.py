"""A planned task made directly in the database: its passages, its plan's calls and its
attempts, at known times from its creation (the worker's own plan is tested elsewhere)."""

from __future__ import annotations

from datetime import timedelta

from reports.models import Attempt, PlanCall, SourcePassage, Status, Task


def planned_task(task: Task, parts: int = 3, reused: int = 1) -> Task:
    """Make `task` a succeeded task of `parts` parts and one round, read by two attempts:
    the first wrote the notes of the first `reused` parts and failed; the second reused
    them, wrote the rest side by side from 1 s, then the round, then the report."""
    t0 = task.created_at

    def at(ms: float):
        return t0 + timedelta(milliseconds=ms)

    SourcePassage.objects.bulk_create(
        SourcePassage(
            task=task,
            number=n,
            document="manual.pdf",
            section=f"Chapter {n}",
            page=n,
            text=f"Passage {n}.",
        )
        for n in range(1, 2 * parts + 1)
    )
    Attempt.objects.create(
        task=task,
        number=1,
        epoch=1,
        status="failed",
        error_type="rate_limited",
        started_at=at(100),
        ended_at=at(600),
        stage_ms={"parse": 20, "prepare": 5, "generate": 450},
    )
    Attempt.objects.create(
        task=task,
        number=2,
        epoch=2,
        status="succeeded",
        started_at=at(800),
        ended_at=at(6000),
        stage_ms={"parse": 20, "prepare": 5, "generate": 5000, "validate": 10, "save": 20},
        first_text_ms=4400,
        input_tokens=900,
        output_tokens=300,
        cost_micros=1200,
    )
    calls = []
    for i in range(1, parts + 1):
        first_attempt = i <= reused
        start = 150 + 100 * i if first_attempt else 1000 + 50 * i
        calls.append(
            PlanCall(
                task=task,
                key=f"part-{i}",
                kind="part",
                position=i,
                first_passage=2 * i - 1,
                last_passage=2 * i,
                label=f"Chapter {2 * i - 1}",
                status="succeeded",
                attempt_number=1 if first_attempt else 2,
                notes=f"Notes of part {i} [S{2 * i}].",
                started_at=at(start),
                ended_at=at(start + 2000 if not first_attempt else start + 200),
                duration_ms=2000 if not first_attempt else 200,
                first_text_ms=150,
                input_tokens=3000 + i,
                output_tokens=400 + i,
                cost_micros=500 + i,
            )
        )
    calls.append(
        PlanCall(
            task=task,
            key="round-1-1",
            kind="round",
            position=parts + 1,
            label="the notes",
            status="succeeded",
            attempt_number=2,
            notes="Combined notes.",
            started_at=at(3300),
            ended_at=at(4000),
            duration_ms=700,
            first_text_ms=90,
            input_tokens=1800,
            output_tokens=500,
            cost_micros=800,
        )
    )
    PlanCall.objects.bulk_create(calls)
    Task.objects.filter(pk=task.pk).update(
        plan={"parts": parts, "rounds": 1, "calls": parts + 2},
        status=Status.SUCCEEDED,
        attempt_count=2,
        claimed_at=at(100),
        first_text_at=at(5200),
        finished_at=at(6000),
    )
    task.refresh_from_db()
    return task
