"""Structured logs: one JSON object a line, with the ids that join a task's lines.

The ids live in context variables: the request middleware binds `request_id` and
`trace_id`, the worker binds `task_id`, `attempt_id`, `request_id` and `trace_id` for
each attempt it runs (from the task row, so its lines join the creating request's).
`log_event` writes one event; the formatter adds the bound ids to every line, so even
a plain `log.warning(...)` says which task it is about.

Never pass document text, prompt text, instructions or secrets as fields: the default
logs carry ids, statuses, timings and counts only.
"""

from __future__ import annotations

import contextlib
import json
import logging
from contextvars import Context, ContextVar
from datetime import UTC, datetime

CONTEXT_FIELDS = ("request_id", "trace_id", "task_id", "attempt_id")
_context: dict[str, ContextVar[str]] = {
    name: ContextVar(f"reportline_{name}", default="") for name in CONTEXT_FIELDS
}
_FIELDS_ATTR = "event_fields"


def current(name: str) -> str:
    """Return the bound value of one context id ("" when unbound)."""
    return _context[name].get()


def context() -> dict[str, str]:
    """Return the bound context ids, leaving out the unbound ones."""
    return {name: var.get() for name, var in _context.items() if var.get()}


def context_of(ctx: Context) -> dict[str, str]:
    """Return the context ids bound in `ctx` (another task's context, say)."""
    return {name: ctx[var] for name, var in _context.items() if ctx.get(var)}


@contextlib.contextmanager
def bound(**ids):
    """Bind context ids for the duration of the block (str() of each; None skips)."""
    tokens = [(_context[name], _context[name].set(str(v))) for name, v in ids.items() if v]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def log_event(logger: logging.Logger, event: str, level: int = logging.INFO, **fields) -> None:
    """Write one event line: its name, the bound context ids and `fields`.

    The context is captured now, not when the line is formatted, so a handler that
    formats later (or in another thread) still joins the line to its task.
    """
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={_FIELDS_ATTR: {**context(), **fields}})


class RefusedRequest(logging.Filter):
    """Write Django's refusal of a suspicious request (a Host not in DJANGO_ALLOWED_HOSTS, a
    bad signature) as a warning without its traceback: the fault is the client's, and
    the traceback is Django's own handler, many lines a request. A scanner sending
    hosts of its own would fill the log with errors and page whoever watches them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("django.security.") and record.levelno > logging.WARNING:
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


class JsonFormatter(logging.Formatter):
    """Format a record as one JSON object: time, level, logger, event, ids, fields."""

    def format(self, record: logging.LogRecord) -> str:
        from reports.observability.version import app_version

        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
            "app_version": app_version(),
            **context(),
            **getattr(record, _FIELDS_ATTR, {}),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False, separators=(",", ":"))
