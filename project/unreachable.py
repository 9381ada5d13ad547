"""A management command whose database cannot be reached ends with one line that says why.

PostgreSQL is reached through a pool (project/settings.py) that retries in the background
and, after `REPORTS_DB_POOL_TIMEOUT_S`, raises "couldn't get a connection" without the
reason. `manage.py migrate` against a stopped server or a wrong host then ended in a
traceback naming neither, and the pool's threads wrote logging errors while Python shut
down. `run_command` asks the server once more, directly, for the reason, says it in one
line, and closes the pools before the process exits.
"""

from __future__ import annotations

import sys


def run_command(argv: list[str]) -> None:
    from django.core.management import execute_from_command_line
    from django.db import OperationalError, connections

    try:
        execute_from_command_line(argv)
    except OperationalError:
        reason = _why_unreachable(connections["default"])
        if reason is None:
            raise
        sys.exit(f"{' '.join(argv[:2])}: {reason}")
    finally:
        close_pools()


def close_pools() -> None:
    """Close this process's connection pools: one left open when Python shuts down has its
    threads write logging errors as it goes."""
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if getattr(connection, "pool", None) is not None:
            connection.close_pool()


def _why_unreachable(connection) -> str | None:
    """Return why a new connection to the PostgreSQL server fails, or None when it does
    not (the error was another one) or the database is SQLite (its errors say it all)."""
    if connection.vendor != "postgresql":
        return None
    import psycopg

    params = connection.get_connection_params()
    conninfo = {
        key: params[key]
        for key in ("dbname", "user", "password", "host", "port")
        if params.get(key)
    }
    where = f"{conninfo.get('host', 'localhost')}:{conninfo.get('port', 5432)}"
    try:
        psycopg.connect(**conninfo, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        # psycopg's message names the host and port, never the password.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (
            f"the PostgreSQL server of DATABASE_URL ({where}, database "
            f"{conninfo.get('dbname', '?')!r}) cannot be reached: {first}"
        )
    return None
