"""Routes for operating Reportline: /version, /metrics and the staff latency page."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from reports import budgets
from reports.auth import ApiError, bearer_token
from reports.models import ApiToken
from reports.observability import charts, delivery_cost, latency, loop_lag, metrics
from reports.observability.percentiles import summarize
from reports.observability.version import app_version


@require_GET
def version(request: HttpRequest) -> JsonResponse:
    """Say which build is running, so a deployment can be checked (public, like a header)."""
    return JsonResponse({"app_version": app_version()})


def metrics_caller_refused(request: HttpRequest) -> ApiError | None:
    """Return why the caller may not scrape /metrics, or None for staff or the metrics token.

    Accepted: a staff session; `Authorization: Bearer` with `REPORTS_METRICS_TOKEN` or a
    staff user's personal token. Anonymous: 401; a user who is not staff: 403.
    """
    token = bearer_token(request)
    if token is not None:
        expected = settings.REPORTS_METRICS_TOKEN
        if expected and hmac.compare_digest(token.encode(), expected.encode()):
            return None
        user = ApiToken.objects.user_for(token)
        if user is None:
            return ApiError(
                401, "unauthenticated", "The token is not valid.", {"WWW-Authenticate": "Bearer"}
            )
    else:
        user = request.user
    if not user.is_authenticated:
        return ApiError(
            401,
            "unauthenticated",
            "Log in as staff, or send the metrics token as 'Authorization: Bearer <token>'.",
            {"WWW-Authenticate": "Bearer"},
        )
    if not user.is_staff:
        return ApiError(403, "forbidden", "Metrics are for staff only.")
    return None


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = metrics_caller_refused(request)
    if refused is not None:
        return refused.response()
    return HttpResponse(generate_latest(metrics.registry), content_type=CONTENT_TYPE_LATEST)


@require_GET
@staff_member_required
def latency_page(request: HttpRequest) -> HttpResponse:
    window = request.GET.get("window", latency.DEFAULT_WINDOW)
    if window not in latency.WINDOWS:
        window = latency.DEFAULT_WINDOW
    calls = request.GET.get("calls", latency.DEFAULT_CALLS)
    if calls not in latency.CALLS:
        calls = latency.DEFAULT_CALLS
    figures = latency.figures(window, calls)
    return render(
        request,
        "reports/staff/latency.html",
        {
            **admin.site.each_context(request),
            "title": "Latency",
            "figures": figures,
            "windows": [(key, label) for key, (label, _) in latency.WINDOWS.items()],
            "window_label": latency.WINDOWS[window][0],
            "calls_choices": [(key, label) for key, (label, _) in latency.CALLS.items()],
            "calls_label": latency.CALLS[calls][0],
            "small_below": settings.REPORTS_LATENCY_SMALL_SAMPLE,
            "is_nav_sidebar_enabled": False,  # the charts need the width
            "task_chart": charts.percentile_chart(
                [(label, s) for _, label, _, s in figures.task_metrics], "Task latency percentiles"
            ),
            "stage_chart": charts.percentile_chart(
                [(label, s) for _, label, _, s in figures.stage_metrics], "Stage percentiles"
            ),
            "task_rows": _rows(figures.task_metrics),
            "stage_rows": _rows(figures.stage_metrics),
            "cost_rows": _cost_rows(figures.model_costs),
            **_this_process(),
        },
    )


def _this_process() -> dict:
    """Return this process's own loop lag, database queue wait and latest stalls."""
    small = settings.REPORTS_LATENCY_SMALL_SAMPLE
    recent = loop_lag.recent
    return {
        "process_rows": _rows(
            [
                (
                    "loop_lag",
                    "Event loop lag",
                    "asked to run at once → ran",
                    summarize(list(recent.lag_ms), small_below=small),
                ),
                (
                    "db_wait",
                    "Database queue wait",
                    "query sent to the shared database thread → started",
                    summarize(list(recent.db_wait_ms), small_below=small),
                ),
            ]
        ),
        "stalls": list(reversed(recent.stalls)),
        "loop_lag_warn_ms": settings.REPORTS_LOOP_LAG_WARN_MS,
    }


def _cost_rows(costs: list[delivery_cost.ModelCost]) -> list[dict]:
    def money(micros: int | None, lower_bound: bool) -> str | None:
        if micros is None:
            return None
        return ("≥ " if lower_bound else "") + budgets.usd(micros, exact=True)

    return [
        {
            "model": cost.model,
            "tasks": cost.tasks,
            "delivered": cost.delivered,
            "attempts": cost.attempts,
            "unknown": cost.unknown,
            "spend": money(cost.spend_micros, cost.unknown > 0),
            "per_attempt": money(cost.per_attempt, False),
            "per_delivered": money(cost.per_delivered, cost.unknown > 0),
            "dearer_than": ", ".join(cost.dearer_than),
        }
        for cost in costs
    ]


def _rows(metrics_: list) -> list[dict]:
    return [
        {
            "label": label,
            "measures": measures,
            "count": s.count,
            "censored": s.censored,
            "small": s.small,
            "p50": charts.format_figure(s[50]),
            "p95": charts.format_figure(s[95]),
            "p99": charts.format_figure(s[99]),
        }
        for _, label, measures, s in metrics_
    ]
