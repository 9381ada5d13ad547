"""Task admin, timing part: one task's waterfall, and three tasks side by side."""

from __future__ import annotations

import uuid
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from reports.models import STAGES, Status, Task
from reports.observability.waterfall import compare, default_trio, task_waterfall

ROLES = ("normal", "slow", "failed")
LEGEND = ("queue", *STAGES, "other")
PLAN_LEGEND = ("part", "round", "final")


class TimingAdminMixin:
    class Media:
        css = {"all": ("css/observability.css",)}

    @admin.display(description="waterfall")
    def waterfall(self, task: Task) -> str:
        if task.pk is None:
            return "-"
        return format_html(
            '<div class="observability" data-waterfall>{}{}</div>',
            task_waterfall(task).chart(),
            legend(planned=bool((task.plan or {}).get("parts"))),
        )

    @admin.action(
        description="Compare side by side (select 3: normal, slow, failed)", permissions=["view"]
    )
    def compare_tasks(self, request, queryset):
        tasks = list(queryset.defer("report_html", "instructions")[:4])
        if len(tasks) != 3:
            self.message_user(request, "Select exactly three tasks to compare.", messages.WARNING)
            return None
        # Succeeded ones first, the faster as the baseline: normal, slow, then the failed.
        tasks.sort(key=lambda t: (t.status != Status.SUCCEEDED, t.duration_ms or 0))
        ids = [t.pk for t in tasks]
        query = urlencode([("task", str(i)) for i in ids])
        return HttpResponseRedirect(f"{reverse('admin:reports_task_compare')}?{query}")

    def get_urls(self):
        compare_url = path(
            "compare/",
            self.admin_site.admin_view(self.compare_view),
            name="reports_task_compare",
        )
        return [compare_url, *super().get_urls()]

    def compare_view(self, request):
        """Three tasks on one time axis, the first the baseline; a sensible trio by default."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        wanted = [value.strip() for value in request.GET.getlist("task") if value.strip()]
        problems = []
        if wanted:
            tasks = []
            for value in wanted[:3]:
                task = _task_or_none(value)
                if task is None:
                    problems.append(f"No task with id {value!r}.")
                else:
                    tasks.append(task)
        else:
            tasks = default_trio()
        comparison = compare(tasks) if tasks else None
        columns = []
        if comparison is not None:
            for i, column in enumerate(comparison.columns):
                columns.append(
                    {
                        "role": ROLES[i] if i < len(ROLES) else f"task {i + 1}",
                        "task": column.task,
                        "chart": column.chart(comparison.axis_ms),
                    }
                )
        return render(
            request,
            "admin/reports/task/compare.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": "Compare tasks side by side",
                "columns": columns,
                "table": comparison.table if comparison else [],
                "ids": [str(t.pk) for t in tasks] + [""] * (3 - len(tasks)),
                "roles": ROLES,
                "problems": problems,
                "legend": legend(),
                "is_nav_sidebar_enabled": False,  # the charts need the width
            },
        )


def _task_or_none(value: str) -> Task | None:
    try:
        task_id = uuid.UUID(value)
    except ValueError:
        return None
    return Task.objects.defer("report_html").filter(pk=task_id).first()


def legend(planned: bool = False) -> str:
    shown = LEGEND + PLAN_LEGEND if planned else LEGEND
    keys = format_html_join(" ", '<span class="key seg {}"></span> {}', ((k, k) for k in shown))
    return format_html('<p class="legend">{} <span class="key marker"></span> first text</p>', keys)
