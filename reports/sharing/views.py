"""The shared pages anyone with a link may open, and the owner's share controls on the
task page (htmx fragments; the JSON routes are `reports.sharing.api`)."""

from __future__ import annotations

import logging
import uuid
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from reports import presentation, rendering, views
from reports.auth import ApiError
from reports.models import Task
from reports.sharing import links, throttle

log = logging.getLogger(__name__)

# Every answer under /shared/, the 404 and the 429 included: kept by no cache, listed by
# no search engine, and the token in the address is never sent on to another site.
SHARED_HEADERS = {
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex",
    "Referrer-Policy": "no-referrer",
}
GONE = {
    "heading": "Link not found",
    "message": "This link does not open a report: it may have expired or been revoked. "
    "Ask whoever shared it for a new one.",
}


def _message(request, status: int, heading: str, message: str) -> HttpResponse:
    context = {"heading": heading, "message": message}
    return render(request, "shared/message.html", context, status=status)


def shared_view(view):
    """Throttle a shared page by client address; answer an unknown, revoked or expired link
    with one 404, the same whichever it was; mark every answer with SHARED_HEADERS."""

    @require_GET
    @wraps(view)
    def wrapper(request, token: str, *args, **kwargs):
        response = _answer(view, request, token, *args, **kwargs)
        for name, value in SHARED_HEADERS.items():
            response[name] = value
        return response

    return wrapper


def _answer(view, request, token: str, *args, **kwargs) -> HttpResponse:
    block = throttle.client_block(request)
    try:
        wait = throttle.wait_s(block)
    except Exception:  # each cache backend raises its own connection errors
        log.exception("shared pages: the count of requests is out of reach")
        return _message(request, 503, "Unavailable", "Shared reports are unavailable for a moment.")
    if wait:
        response = _message(
            request,
            429,
            "Too many requests",
            f"Too many requests from your address. Try again in {wait} seconds.",
        )
        response["Retry-After"] = str(wait)
        return response
    task = links.shared_task(token)
    if task is None:
        return _message(request, 404, **GONE)
    try:
        return view(request, task, *args, **kwargs)
    except Http404:
        return _message(request, 404, **GONE)


@shared_view
def report(request: HttpRequest, task: Task) -> HttpResponse:
    report_lang, report_html = presentation.report_in_its_language(task.report_html)
    context = {
        "report_html": report_html,
        "report_lang": report_lang,
        "title": rendering.report_title(task.report_html),
        "citation_notice": presentation.citation_notice(task),
        "cites": bool(rendering.linked_passages(task.report_html)),
    }
    return render(request, "shared/report.html", context)


@shared_view
def source(request: HttpRequest, task: Task, passage_id: str) -> HttpResponse:
    """Show a passage the shared report cites, or the one just before or after a cited
    passage (its context), by the share link, never by the task id.

    Nothing further: the rest of the owner's documents is not shared, so a neighbour's
    page links on only to passages the link opens, and any other id answers the link's
    404.
    """
    opened = _opened_passages(task)
    passage = presentation.source_passage(task, passage_id)
    if passage is None or passage.number not in opened:
        raise Http404
    previous, following = presentation.passage_neighbours(task, passage)
    context = {
        "passage": passage,
        "blocks": presentation.passage_blocks(passage.text),
        "previous": previous if passage.number - 1 in opened else None,
        "next": following if passage.number + 1 in opened else None,
        "title": rendering.report_title(task.report_html),
    }
    return render(request, "shared/source.html", context)


def _opened_passages(task: Task) -> set[int]:
    """Return the numbers of the passages a share link opens: those the report links to
    and the ones just before and after each."""
    cited = rendering.linked_passages(task.report_html)
    return {number + step for number in cited for step in (-1, 0, 1)}


# --- the owner's controls on the task page ----------------------------------------------


def _share_section(request: HttpRequest, task: Task, status: int = 200, **extra):
    """Answer htmx with the page's share section, a plain form post with the whole page."""
    if not request.htmx:
        response = views.task_page(request, task, **extra)
        response.status_code = status
        return response
    context = {"task": task, "succeeded": True, "share_links": list(task.share_links.live())}
    context.update(extra)
    return render(request, "reports/task.html#share", context, status=status)


@login_required
@require_POST
def create(request: HttpRequest, task_id: uuid.UUID) -> HttpResponse:
    task = views.owned_or_404(request, task_id)
    try:
        days = links.read_days(request.POST.get("expires_in_days"))
        new = links.create_link(task, days)
    except ApiError as exc:
        return _share_section(request, task, exc.status, share_error=exc.message)
    url = request.build_absolute_uri(new.path)
    return _share_section(request, task, new_link={"url": url, "expires_at": new.expires_at})


@login_required
@require_POST
def revoke(request: HttpRequest, task_id: uuid.UUID) -> HttpResponse:
    task = views.owned_or_404(request, task_id)
    count = links.revoke_links(task)
    said = f"{count} link{'s' if count != 1 else ''} revoked." if count else "No link to revoke."
    return _share_section(request, task, share_done=said)
