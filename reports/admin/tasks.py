"""Django admin: staff see every task, its attempts, events and timings; only actions change it."""

from __future__ import annotations

import uuid
from datetime import UTC

from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Exists, OuterRef, Q, Subquery
from django.db.models.functions import Now
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from reports import budgets, lifecycle, storage
from reports.admin.actions import CheckedSelectionMixin
from reports.admin.budgets import settle_page
from reports.admin.events import EVERY_EVENT, event_table
from reports.admin.inlines import (
    AttemptInline,
    DocumentInline,
    ShareLinkInline,
    WebhookDeliveryInline,
    format_cost,
    format_stages,
)
from reports.admin.page import staff_page
from reports.admin.plan import plan_label, plan_table
from reports.admin.timing import TimingAdminMixin
from reports.models import (
    LEASED,
    ApiToken,
    Attempt,
    CostStatus,
    Document,
    Status,
    Task,
)
from reports.observability.charts import format_ms
from reports.reconciliation import ResolutionRefused, resolve_reconciliation
from reports.serving import download_names


class ErrorTypeFilter(admin.SimpleListFilter):
    title = "error type"
    parameter_name = "error_type"

    def lookups(self, request, model_admin):
        values = (
            model_admin.model._default_manager.exclude(error_type="")
            .order_by("error_type")
            .values_list("error_type", flat=True)
            .distinct()
        )
        return [(v, v) for v in values]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.filter(error_type=self.value())
        return queryset


class AttentionFilter(admin.SimpleListFilter):
    """The tasks an operator looks at first: those no worker holds any more, and those
    waiting on an administrator. A worker's reaper requeues the first kind; while no
    worker runs, nothing does, and the list shows them as running all the same."""

    title = "needs attention"
    parameter_name = "attention"

    def lookups(self, request, model_admin):
        return [
            ("lease_expired", "running, lease expired"),
            ("reconciliation", "waiting on an administrator"),
            ("cancel_unheeded", "cancel asked, still running"),
        ]

    def queryset(self, request, queryset):
        value = self.value()
        if value == "lease_expired":
            return queryset.filter(status__in=LEASED, lease_expires_at__lt=Now())
        if value == "reconciliation":
            return queryset.filter(status=Status.RECONCILIATION_REQUIRED)
        if value == "cancel_unheeded":
            return queryset.filter(status__in=LEASED, cancel_requested_at__isnull=False)
        return queryset


class UuidSearchMixin:
    """Search by exact UUID when the term parses as one; otherwise by `search_fields`."""

    uuid_search_fields: tuple[str, ...] = ("pk",)

    def get_search_results(self, request, queryset, search_term):
        try:
            value = uuid.UUID(search_term.strip())
        except ValueError:
            return super().get_search_results(request, queryset, search_term)
        matches = Q()
        for field in self.uuid_search_fields:
            matches |= Q(**{field: value})
        return queryset.filter(matches), False


class ReadOnlyAdmin(CheckedSelectionMixin, admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_operate_permission(self, request) -> bool:
        """Actions need the real change permission, though no form can change anything."""
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.{get_permission_codename('change', opts)}")


def timestamp(field: str, description: str):
    """Return an admin column of a task's timestamp, to the second, in UTC."""

    @admin.display(description=description, ordering=field)
    def show(self, task: Task) -> str:
        value = getattr(task, field)
        return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    return show


@admin.register(Task)
class TaskAdmin(TimingAdminMixin, UuidSearchMixin, ReadOnlyAdmin):
    # Whole at 1366 px beside the admin's menu and filters: the document with a short id
    # under it, the status with its error type under it, and the measures that matter (the
    # queue time is on the task's page).
    list_display = (
        "document",
        "owner_tasks",
        "outcome",
        "cost",
        "created",
        "first_text_ms",
        "duration_ms",
    )
    list_display_links = ("document",)
    list_filter = (
        AttentionFilter,
        "status",
        "lane",
        ErrorTypeFilter,
        "cost_status",
        "scenario",
    )
    list_select_related = ("owner",)
    search_fields = ("owner__username", "documents__name", "instructions")
    search_help_text = (
        "An id from a log line (exact): task, attempt, request, trace, worker or the "
        "provider's request id; or an owner's username, a file name or instructions."
    )
    date_hierarchy = "created_at"
    inlines = (DocumentInline, AttemptInline, ShareLinkInline, WebhookDeliveryInline)
    actions = ("cancel_tasks", "requeue_reconciled", "fail_reconciled", "compare_tasks")
    # The outcome and the waterfall first: what an admin opens a task for.
    fieldsets = (
        (
            "Outcome",
            {"fields": ("id", "owner", "status", "error_type", "user_message", "report_link")},
        ),
        ("Timings", {"fields": ("waterfall", "timings")}),
        ("Plan", {"fields": ("plan_calls",)}),
        (
            "Request",
            {
                "fields": (
                    "lane",
                    "scenario",
                    "instructions",
                    "input_bytes",
                    "content_sha256",
                )
            },
        ),
        (
            "Execution",
            {
                "fields": (
                    "attempt_count",
                    "epoch",
                    "worker_id",
                    "created",
                    "claimed",
                    "first_text",
                    "finished",
                    "not_before_at",
                    "lease_expires",
                    "cancel_requested",
                )
            },
        ),
        (
            "Cost",
            {"fields": ("model", "prompt_version", "cost_status", "reserved", "cost", "settle")},
        ),
        ("Result", {"fields": ("result_id", "result_sha256", "result_bytes")}),
        ("Events", {"fields": ("events",)}),
    )
    readonly_fields = (*(f for _, spec in fieldsets for f in spec["fields"]), "every_event")

    created = timestamp("created_at", "created")
    claimed = timestamp("claimed_at", "claimed")
    first_text = timestamp("first_text_at", "first text at")
    finished = timestamp("finished_at", "finished")
    not_before_at = timestamp("not_before", "not before")
    lease_expires = timestamp("lease_expires_at", "lease expires")
    cancel_requested = timestamp("cancel_requested_at", "cancel requested")

    def has_delete_permission(self, request, obj=None) -> bool:
        # A task holds a reservation and stored files that only its end releases: cancel it.
        return False

    def get_search_results(self, request, queryset, search_term):
        """Find a task by any id its log lines carry (docs/observability.md), exactly; a
        term that is none of them searches `search_fields` as usual."""
        term = search_term.strip()
        if not term or " " in term:
            return super(UuidSearchMixin, self).get_search_results(request, queryset, term)
        ids = Q(request_id=term) | Q(trace_id=term.lower()) | Q(worker_id=term)
        attempts = Q(provider_request_id=term) | Q(worker_id=term)
        try:
            value = uuid.UUID(term)
        except ValueError:
            pass
        else:
            # A 32-digit request or trace id parses as a UUID too.
            ids |= Q(pk=value) | Q(result_id=value) | Q(request_id=value.hex)
            ids |= Q(trace_id=value.hex)
            attempts |= Q(pk=value)
        found = queryset.filter(
            ids | Q(Exists(Attempt.objects.filter(attempts, task=OuterRef("pk"))))
        )
        if found.exists():
            return found, False
        return super(UuidSearchMixin, self).get_search_results(request, queryset, term)

    def get_queryset(self, request):
        # The rendered report can be large and no admin page shows it.
        first_document = Document.objects.filter(task=OuterRef("pk")).order_by("position")
        return (
            super()
            .get_queryset(request)
            .defer("report_html")
            .annotate(first_document=Subquery(first_document.values("name")[:1]))
        )

    @admin.display(description="document", ordering="first_document")
    def document(self, task: Task) -> str:
        # A planned task says so under its document ("12 parts"), taking no column.
        planned = plan_label(task.plan)
        return format_html(
            '<span class="task-document">{}</span><br><small title="{}">{}</small>{}',
            task.first_document or "-",
            task.pk,
            str(task.pk)[:8],
            format_html(' · <small class="planned" data-planned>{}</small>', planned)
            if planned
            else "",
        )

    @admin.display(description="owner", ordering="owner__username")
    def owner_tasks(self, task: Task) -> str:
        # Their tasks, by id: a search for "ann" would list joanna's too.
        return format_html(
            '<a href="?owner__id__exact={}" title="Every task of {}">{}</a>',
            task.owner_id,
            task.owner,
            task.owner,
        )

    @admin.display(description="status", ordering="status")
    def outcome(self, task: Task) -> str:
        if not task.error_type:
            return task.get_status_display()
        return format_html("{}<br><small>{}</small>", task.get_status_display(), task.error_type)

    @admin.display(description="plan of calls")
    def plan_calls(self, task: Task) -> str:
        return plan_table(task)

    @admin.display(description="reserved", ordering="reserved_micros")
    def reserved(self, task: Task) -> str:
        return budgets.usd(task.reserved_micros, exact=True)

    @admin.display(description="cost", ordering="cost_micros")
    def cost(self, task: Task) -> str:
        return "-" if task.cost_micros is None else budgets.usd(task.cost_micros, exact=True)

    @admin.display(description="settle")
    def settle(self, task: Task) -> str:
        url = reverse("admin:reports_task_settle", args=[task.pk])
        if task.cost_status == CostStatus.PENDING_RECONCILIATION:
            return format_html('<a href="{}">Settle the unknown cost…</a>', url)
        if budgets.estimated_attempt(task.pk) is not None:
            return format_html('<a href="{}">Correct the estimated cost…</a>', url)
        return "-"

    @admin.display(description="first text", ordering="first_text_at")
    def first_text_ms(self, task: Task) -> str:
        return format_ms(task.first_text_ms)

    @admin.display(description="duration", ordering="finished_at")
    def duration_ms(self, task: Task) -> str:
        return format_ms(task.duration_ms)

    @admin.display(description="page first text", ordering="frontend_first_text_ms")
    def frontend_first_text_ms(self, task: Task) -> str:
        return format_ms(task.frontend_first_text_ms)

    @admin.display(description="events")
    def events(self, task: Task) -> str:
        return event_table(task, every_event=False)

    @admin.display(description="events")
    def every_event(self, task: Task) -> str:
        return event_table(task, every_event=True)

    def get_fieldsets(self, request, obj=None):
        if request.GET.get("events") != EVERY_EVENT:
            return self.fieldsets
        return [
            (name, {"fields": ("every_event",)}) if name == "Events" else (name, spec)
            for name, spec in self.fieldsets
        ]

    @admin.display(description="timings")
    def timings(self, task: Task) -> str:
        rows = [
            ("queue (submit → first claim)", format_ms(task.queue_ms)),
            ("first text, backend (submit → first text)", format_ms(task.first_text_ms)),
            ("first text, page (measured by the browser)", format_ms(task.frontend_first_text_ms)),
            ("duration (submit → saved result or end)", format_ms(task.duration_ms)),
        ]
        for attempt in task.attempts.order_by("number").only(
            "number", "status", "first_text_ms", "stage_ms"
        ):
            rows.append(
                (
                    f"attempt {attempt.number} ({attempt.status})",
                    f"first text {format_ms(attempt.first_text_ms)} · "
                    f"{format_stages(attempt.stage_ms)}",
                )
            )
        return format_html(
            "<table><tbody>{}</tbody></table>",
            format_html_join("", "<tr><th>{}</th><td>{}</td></tr>", rows),
        )

    @admin.display(description="report")
    def report_link(self, task: Task) -> str:
        if task.status != Status.SUCCEEDED or task.result_id is None:
            return "-"
        url = reverse("admin:reports_task_report", args=[task.pk])
        return format_html('<a href="{}">Download report ({} bytes)</a>', url, task.result_bytes)

    def get_urls(self):
        report = path(
            "<uuid:task_id>/report/",
            self.admin_site.admin_view(self.report_view),
            name="reports_task_report",
        )
        settle = path(
            "<uuid:task_id>/settle/",
            self.admin_site.admin_view(self.settle_view),
            name="reports_task_settle",
        )
        page = path(
            "<uuid:task_id>/page/",
            self.admin_site.admin_view(self.page_view),
            name="reports_task_page",
        )
        return [report, settle, page, *super().get_urls()]

    def page_view(self, request, task_id):
        """The task page as its owner sees it, read-only."""
        return staff_page(self, request, task_id)

    def settle_view(self, request, task_id):
        """Settle a task whose usage is unknown; a task in reconciliation also ends failed."""
        return settle_page(self, request, task_id)

    def report_view(self, request, task_id) -> HttpResponse:
        """Serve a succeeded task's saved report to staff, whoever owns it."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        task = get_object_or_404(Task, pk=task_id, status=Status.SUCCEEDED)
        try:
            report = storage.read_result(task.result_id)
        except FileNotFoundError:
            raise Http404("The saved report file is missing.") from None
        markdown = "text/markdown; charset=utf-8"
        return download_names.download(report, markdown, f"report-{task.pk}.md")

    @admin.action(description="Cancel selected tasks", permissions=["operate"])
    def cancel_tasks(self, request, queryset) -> None:
        # The tasks that ended are counted in one query, and only those still queued or
        # leased are visited one by one: a selection of every page (tens of thousands of
        # tasks, nearly all ended) took a read each, and outlasted a proxy's timeout.
        cancelled = asked = finished = waiting = 0
        active = (Status.QUEUED, *LEASED)
        ended = queryset.exclude(status__in=active).order_by().values_list("status")
        for status, count in ended.annotate(count=Count("pk")):
            # A task waiting on an administrator has not finished, and cancelling is not
            # how it is resolved.
            if status == Status.RECONCILIATION_REQUIRED:
                waiting += count
            else:
                finished += count
        for task in queryset.filter(status__in=active).select_related(None).only("id", "status"):
            if not lifecycle.cancel_task(task):  # it ended meanwhile
                if task.status == Status.RECONCILIATION_REQUIRED:
                    waiting += 1
                else:
                    finished += 1
            elif task.status in LEASED:
                asked += 1
            else:
                cancelled += 1
        message = (
            f"{cancelled} cancelled, {asked} asked to stop (running), {finished} already finished."
        )
        if waiting:
            message += (
                f" {waiting} in reconciliation_required, not cancelled: requeue them or mark "
                "them failed."
            )
        self.message_user(
            request,
            message,
            messages.SUCCESS if finished == waiting == 0 else messages.WARNING,
        )

    @admin.action(
        description="Requeue (reconciliation resolved: run again)", permissions=["operate"]
    )
    def requeue_reconciled(self, request, queryset) -> None:
        self._resolve(request, queryset, Status.QUEUED, "requeued")

    @admin.action(
        description="Mark failed (reconciliation resolved: the provider did not run it)",
        permissions=["operate"],
    )
    def fail_reconciled(self, request, queryset) -> None:
        self._resolve(request, queryset, Status.FAILED, "marked failed")

    def _resolve(self, request, queryset, to: str, done: str) -> None:
        resolved, skipped = 0, []
        for task_id in queryset.values_list("pk", flat=True):
            try:
                event = resolve_reconciliation(task_id, to, by_user=request.user)
            except ResolutionRefused as refused:
                self.message_user(request, str(refused), messages.ERROR)
                continue
            if event is None:
                skipped.append(str(task_id))
            else:
                resolved += 1
        if resolved:
            self.message_user(request, f"{resolved} task(s) {done}.", messages.SUCCESS)
        if skipped:
            self.message_user(
                request,
                f"Skipped {len(skipped)} task(s) not in reconciliation_required: "
                + ", ".join(skipped),
                messages.WARNING,
            )


@admin.register(Attempt)
class AttemptAdmin(UuidSearchMixin, ReadOnlyAdmin):
    list_display = (
        "task",
        "number",
        "status",
        "error_type",
        "first_text_ms",
        "cost",
        "worker_id",
        "started_at",
    )
    list_filter = ("status", ErrorTypeFilter)
    list_select_related = ("task",)
    search_fields = ("task__owner__username", "=provider_request_id", "=worker_id")
    search_help_text = (
        "An attempt's or its task's id (exact), the provider's request id, a worker id, "
        "or an owner's username."
    )
    uuid_search_fields = ("pk", "task_id")
    ordering = ("-started_at",)

    def get_queryset(self, request):
        # Texts and rendered reports can be hundreds of KB each; the list shows neither.
        return (
            super().get_queryset(request).select_related("task").defer("text", "task__report_html")
        )

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="cost", ordering="cost_micros")
    def cost(self, attempt: Attempt) -> str:
        return format_cost(attempt.cost_micros)


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens are issued with `manage.py issue_token`; here they can be seen and revoked."""

    list_display = ("user", "label", "digest_prefix", "created_at", "last_used_at")
    list_select_related = ("user",)
    search_fields = ("user__username", "label")
    fields = readonly_fields = ("user", "label", "digest_prefix", "created_at", "last_used_at")

    @admin.display(description="digest")
    def digest_prefix(self, token: ApiToken) -> str:
        return token.digest[:12] + "…"
