"""The benchmarks' access to the app's database, in a process of its own (the layout's
settings come from the environment): prepare a user, read back what was stored.

    python -m bench.db prepare            -> {"cookie": ..., "token": ...}
    python -m bench.db collect [task ids]  -> {"<task id>": {"status", "text", "events", …}}
    python -m bench.db plan task ids        -> {"<task id>": {"plan", "calls", "attempt", …}}
    python -m bench.db audit                -> every task with its attempts, events and saved
                                               report, the budgets and the retry bound
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import django


def prepare() -> dict:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from reports.models import ApiToken

    if connection.vendor == "postgresql":
        create_database(connection)
    call_command("migrate", verbosity=0)
    if connection.vendor == "postgresql":
        call_command("flush", interactive=False, verbosity=0)  # a clean slate every run
    user, _ = get_user_model().objects.get_or_create(username="bench")
    client = Client()
    client.force_login(user)
    return {"cookie": client.cookies["sessionid"].value, "token": ApiToken.objects.issue(user)}


def create_database(connection) -> None:
    """Create the scale-out layout's PostgreSQL database on first use."""
    import psycopg
    from psycopg import sql

    name = connection.settings_dict["NAME"]
    params = {**connection.get_connection_params(), "dbname": "postgres"}
    with psycopg.connect(**params, autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def collect(task_ids: list[str]) -> dict:
    from reports.models import Task, TaskEvent

    found = {}
    tasks = Task.objects.filter(pk__in=task_ids) if task_ids else Task.objects.all()
    for task in tasks:
        attempt = task.attempts.order_by("-number").first()
        events = TaskEvent.objects.filter(task=task).order_by("seq")
        found[str(task.pk)] = {
            "status": task.status,
            "error": [task.error_type, task.user_message],
            "text": attempt.text if attempt else "",
            "attempts": task.attempts.count(),
            "queue_ms": task.queue_ms,
            "first_text_ms": task.first_text_ms,
            "frontend_first_text_ms": task.frontend_first_text_ms,
            "events": [[e.seq, e.type, len(e.data.get("text", ""))] for e in events],
        }
    return found


def plan(task_ids: list[str]) -> dict:
    """Return each task's plan, its calls' timings, and its last attempt's text and time
    before the generate stage (parse and prepare, where the plan is made)."""
    from reports.models import Task

    found = {}
    for task in Task.objects.filter(pk__in=task_ids):
        attempt = task.attempts.order_by("-number").first()
        stages = attempt.stage_ms if attempt else {}
        found[str(task.pk)] = {
            "status": task.status,
            "error": [task.error_type, task.user_message],
            "plan": task.plan,
            "attempt": attempt.number if attempt else 0,
            "text": attempt.text if attempt else "",
            "before_generate_ms": stages.get("parse", 0.0) + stages.get("prepare", 0.0),
            "parse_ms": stages.get("parse"),
            "calls": [
                [call.key, call.status, call.attempt_number, call.duration_ms, call.error_type]
                for call in task.plan_calls.order_by("position")
            ],
        }
    return found


def audit() -> dict:
    """Return what the fault soak (bench/chaos.py) judges, as stored: every task with its
    attempts, its events and its saved report read back from the store, each budget, the
    settings that bound them, and the result files no task names."""
    import hashlib

    from django.conf import settings

    from reports import storage
    from reports.models import Budget, Task

    tasks = {}
    for task in Task.objects.prefetch_related("attempts", "events", "plan_calls"):
        result = None
        if task.result_id:
            try:
                data = storage.read_result(task.result_id)
                result = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
                result["text"] = data.decode()
            except FileNotFoundError:
                result = {}
        tasks[str(task.pk)] = {
            "owner_id": task.owner_id,
            "status": task.status,
            "error_type": task.error_type,
            "scenario": task.scenario,
            "attempt_count": task.attempt_count,
            "last_seq": task.last_seq,
            "leased_until": str(task.lease_expires_at or ""),
            "worker_id": task.worker_id,
            "cancel_requested": task.cancel_requested_at is not None,
            "cost_status": task.cost_status,
            "reserved_micros": task.reserved_micros,
            "cost_micros": task.cost_micros,
            "result_id": str(task.result_id or ""),
            "result_sha256": task.result_sha256,
            "result_bytes": task.result_bytes,
            "result": result,
            "plan_calls": task.plan_calls.count(),
            "attempts": [
                {
                    "number": a.number,
                    "status": a.status,
                    "error_type": a.error_type,
                    "ended": a.ended_at is not None,
                    "text": a.text,
                    "cost_micros": a.cost_micros,
                    "removed_citations": a.removed_citations,
                }
                for a in sorted(task.attempts.all(), key=lambda a: a.number)
            ],
            "events": [[e.seq, e.type, e.data] for e in sorted(task.events.all(), key=seq_of)],
        }
    named = {f"{t['result_id']}.md" for t in tasks.values() if t["result_id"]}
    results_dir = Path(settings.REPORTS_STORAGE_DIR) / "results"
    saved = {path.name for path in results_dir.glob("*.md")} if results_dir.exists() else set()
    return {
        "max_attempts": settings.REPORTS_MAX_ATTEMPTS,
        "tasks": tasks,
        "budgets": [
            {"user_id": b.user_id, "spent": b.spent_micros, "reserved": b.reserved_micros}
            for b in Budget.objects.all()
        ],
        "orphan_results": sorted(saved - named),
    }


def seq_of(event) -> int:
    return event.seq


def main() -> None:
    django.setup()
    command, args = sys.argv[1], sys.argv[2:]
    if command == "prepare":
        result = prepare()
    elif command == "collect":
        result = collect(args)
    elif command == "plan":
        result = plan(args)
    elif command == "audit":
        result = audit()
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
