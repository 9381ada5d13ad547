"""The benchmarks' access to the app's database, in a process of its own (the layout's
settings come from the environment): prepare a user, read back what was stored.

    python -m bench.db prepare            -> {"cookie": ..., "token": ...}
    python -m bench.db collect [task ids]  -> {"<task id>": {"status", "text", "events", …}}
    python -m bench.db plan task ids        -> {"<task id>": {"plan", "calls", "attempt", …}}
"""

from __future__ import annotations

import json
import sys

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


def main() -> None:
    django.setup()
    command, args = sys.argv[1], sys.argv[2:]
    if command == "prepare":
        result = prepare()
    elif command == "collect":
        result = collect(args)
    elif command == "plan":
        result = plan(args)
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
