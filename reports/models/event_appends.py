"""The fenced append of streamed events, as SQL written once for each size of batch.

Every chunk a report streams takes this path (`TaskQuerySet.append_events`): renew the
leases still held, take each task's next seq, insert the events. Built by the ORM for
every batch, its statements cost about four times the database's own work in Python
(the filter, the expressions, the insert compiled anew), on the one thread every chunk
of the process waits for. Here the text of each statement is made once per database,
batch size and kind (with the first text's time or without) and kept; a batch only
fills in its parameters.

Times are the database's, as the ORM's `Now()` gives them: `STATEMENT_TIMESTAMP()` on
PostgreSQL, `STRFTIME('%Y-%m-%d %H:%M:%f', 'NOW')` on SQLite (where 'NOW' is one instant
for the whole statement).
"""

from __future__ import annotations

import functools
import json
import uuid
from datetime import timedelta

from django.db import connections, transaction

from reports import events
from reports.states import LEASED

_STATUSES = sorted(LEASED)  # the statuses under a lease, as parameters
# What each renewed task gives back: its new seq, its attempt count (which stamps its
# event) and whether a cancel was requested.
_RETURNED = "id, last_seq, attempt_count, cancel_requested_at"


def append(using: str, tables: tuple[str, str], appends, *, first_text: bool, lease_s: float):
    """Renew the leases held in `appends` ((task id, epoch, draft) each, one per task)
    and insert the events of the tasks renewed; return, per append in order, (seq,
    attempt count, cancel requested at), or None where the lease was lost. One statement
    on PostgreSQL; on SQLite, an update and an insert in one transaction."""
    ids = [_uuid(task_id) for task_id, _, _ in appends]
    epochs = [epoch for _, epoch, _ in appends]
    connection = connections[using]
    if connection.vendor == "postgresql":
        data = []
        for task_id, (_, _, draft) in zip(ids, appends, strict=True):
            data += [str(task_id), draft.type, json.dumps(draft.data)]
        held = [value for pair in zip(map(str, ids), epochs, strict=True) for value in pair]
        sql = _postgresql(tables, len(appends), first_text)
        with connection.cursor() as cursor:
            cursor.execute(sql, [timedelta(seconds=lease_s), *_STATUSES, *held, *data])
            rows = {_uuid(pk): tuple(rest) for pk, *rest in cursor.fetchall()}
        return [rows.get(task_id) for task_id in ids]
    held = [value for pair in zip((i.hex for i in ids), epochs, strict=True) for value in pair]
    with transaction.atomic(using=using), connection.cursor() as cursor:
        sql = _sqlite_update(tables[0], len(appends), first_text)
        cursor.execute(sql, [f"+{lease_s} seconds", *_STATUSES, *held])
        rows = {_uuid(pk): tuple(rest) for pk, *rest in cursor.fetchall()}
        values = []
        for task_id, (_, _, draft) in zip(ids, appends, strict=True):
            row = rows.get(task_id)
            if row is not None:
                values += [task_id.hex, row[0], draft.type, json.dumps(draft.stamped(row[1]))]
        if values:
            cursor.execute(_sqlite_insert(tables[1], len(values) // 4), values)
    return [rows.get(task_id) for task_id in ids]


def _uuid(value) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _renewal(now: str, lease: str, first_text: bool) -> str:
    first = f", first_text_at = COALESCE(first_text_at, {now})" if first_text else ""
    return f"last_seq = last_seq + 1, lease_expires_at = {lease}{first}"


def _fence(batch: int, task_id: str) -> str:
    held = " OR ".join([f"(id = {task_id} AND epoch = %s)"] * batch)
    return f"status IN ({', '.join(['%s'] * len(_STATUSES))}) AND ({held})"


@functools.cache
def _sqlite_update(table: str, batch: int, first_text: bool) -> str:
    now = "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')"
    lease = "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW', %s)"
    return (
        f"UPDATE {table} SET {_renewal(now, lease, first_text)} "
        f"WHERE {_fence(batch, '%s')} RETURNING {_RETURNED}"
    )


@functools.cache
def _sqlite_insert(table: str, rows: int) -> str:
    values = ", ".join(["(%s, %s, %s, %s)"] * rows)
    return f"INSERT INTO {table} (task_id, seq, type, data) VALUES {values}"


@functools.cache
def _postgresql(tables: tuple[str, str], batch: int, first_text: bool) -> str:
    """One statement, so one round trip: the fenced UPDATE … RETURNING feeds the INSERT of
    the events in a CTE, and only the tasks it updated get one."""
    task_table, event_table = tables
    now = "STATEMENT_TIMESTAMP()"
    renewal = _renewal(now, f"{now} + %s", first_text)
    values = ", ".join(["(%s::uuid, %s, %s::jsonb)"] * batch)
    return f"""
        WITH renewed AS (
            UPDATE {task_table} SET {renewal}
            WHERE {_fence(batch, "%s::uuid")}
            RETURNING {_RETURNED}
        ), written AS (
            INSERT INTO {event_table} (task_id, seq, type, data)
            SELECT renewed.id, renewed.last_seq, event.type,
                jsonb_build_object('{events.ATTEMPT}'::text, renewed.attempt_count) || event.data
            FROM renewed JOIN (VALUES {values}) AS event (task_id, type, data)
                ON event.task_id = renewed.id
        )
        SELECT {_RETURNED} FROM renewed
    """
