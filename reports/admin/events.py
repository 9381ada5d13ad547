"""A task's events on its admin page: every event but the text, whose one-fragment `delta`
events (hundreds in a report) are counted as one row per attempt; `?events=all` lists the
latest events as they were written, text included."""

from __future__ import annotations

import json

from django.utils.formats import localize
from django.utils.html import format_html, format_html_join

from reports.admin.inlines import truncate
from reports.models import Task, TaskEvent

EVENTS_SHOWN = 200
EVERY_EVENT = "all"  # the value of ?events= that lists every event


def event_table(task: Task, *, every_event: bool) -> str:
    """Return the task's latest events as an HTML table, the text counted as one row per
    attempt unless `every_event`, under a line saying what is shown and how to see the rest."""
    stored = TaskEvent.objects.filter(task=task)
    if not every_event:
        stored = stored.without_text()
    latest = list(stored.order_by("-seq")[:EVENTS_SHOWN])[::-1]
    rows = [(e.seq, e.type, localize(e.created_at), _data(e)) for e in latest]
    cut = (
        f", {'' if every_event else 'of the others '}only the latest {EVENTS_SHOWN} "
        f"(seq {latest[0].seq} to {latest[-1].seq})"
        if len(latest) == EVENTS_SHOWN
        else ""
    )
    if every_event:
        note = format_html(
            '{} events in all, text included{}. <a href="?">Count the text as one line</a>.',
            task.last_seq,
            cut,
        )
    else:
        rows += [_text_row(run) for run in TaskEvent.objects.text_runs(task.pk)]
        rows.sort(key=lambda row: row[0])
        note = format_html(
            "{} events in all; the text is counted as one line per attempt{}. "
            '<a href="?events={}" data-every-event>Every event, text included</a>.',
            task.last_seq,
            cut,
            EVERY_EVENT,
        )
    return format_html(
        '<p class="events-note">{}</p><table data-events><thead><tr><th>seq</th><th>type</th>'
        "<th>at</th><th>data</th></tr></thead><tbody>{}</tbody></table>",
        note,
        format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
    )


def _text_row(run: dict) -> tuple:
    attempt = f"attempt {run['number']}: " if run["number"] is not None else ""
    return (
        run["first_seq"],
        "text",
        f"first {localize(run['first_at'])}, last {localize(run['last_at'])}",
        f"{attempt}{run['events']:,} events, {run['chars']:,} characters",
    )


def _data(event: TaskEvent) -> str:
    return truncate(json.dumps(event.data, ensure_ascii=False), 120)
