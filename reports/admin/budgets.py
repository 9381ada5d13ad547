"""Django admin for money: users' budgets, and settling a task whose usage is unknown."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import F
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode

from reports import budgets
from reports.admin.actions import CheckedSelectionMixin
from reports.models import Budget, CostStatus, Status, Task
from reports.reconciliation import resolve_reconciliation


class BudgetForm(forms.ModelForm):
    limit_usd = forms.DecimalField(
        label="Limit (US dollars)", min_value=0, max_digits=15, decimal_places=6
    )

    class Meta:
        model = Budget
        fields = ("user",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if "user" not in self.fields:
            return  # shown read-only, to staff who may only view budgets
        if self.instance.pk:
            self.fields["user"].disabled = True
            self.fields["limit_usd"].initial = Decimal(self.instance.limit_micros) / budgets.MICROS
        else:
            self.fields["limit_usd"].initial = (
                Decimal(settings.REPORTS_DEFAULT_BUDGET_MICROS) / budgets.MICROS
            )

    def clean_limit_usd(self) -> Decimal:
        limit = self.cleaned_data["limit_usd"]
        self.limit_micros = int(limit * budgets.MICROS)
        if self.instance.pk:
            held = Budget.objects.filter(pk=self.instance.pk).values_list(
                "spent_micros", "reserved_micros"
            )[0]
            if self.limit_micros < sum(held):
                raise forms.ValidationError(
                    f"Spent and reserved already add up to {budgets.usd(sum(held), exact=True)}; "
                    "the limit cannot be lower."
                )
        return limit


@admin.register(Budget)
class BudgetAdmin(CheckedSelectionMixin, admin.ModelAdmin):
    """Admins set limits; spent and reserved move only with tasks (or a new period)."""

    form = BudgetForm
    list_display = ("user", "limit", "spent", "reserved", "remaining", "tasks")
    list_select_related = ("user",)
    search_fields = ("user__username",)
    raw_id_fields = ("user",)
    readonly_fields = ("limit", "spent", "reserved", "remaining", "tasks")
    actions = ("start_new_period",)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("user", "limit_usd")
        limit = "limit_usd" if self.has_change_permission(request, obj) else "limit"
        return ("user", limit, "spent", "reserved", "remaining", "tasks")

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # it holds the reservations of the user's running tasks

    @admin.display(description="limit", ordering="limit_micros")
    def limit(self, budget: Budget) -> str:
        return budgets.usd(budget.limit_micros, exact=True)

    @admin.display(description="spent", ordering="spent_micros")
    def spent(self, budget: Budget) -> str:
        return budgets.usd(budget.spent_micros, exact=True)

    @admin.display(description="reserved", ordering="reserved_micros")
    def reserved(self, budget: Budget) -> str:
        return budgets.usd(budget.reserved_micros, exact=True)

    @admin.display(description="remaining")
    def remaining(self, budget: Budget) -> str:
        return budgets.usd(budget.remaining_micros, exact=True)

    @admin.display(description="tasks")
    def tasks(self, budget: Budget) -> str:
        # By the owner's id: a search for "ann" would list joanna's tasks too.
        query = urlencode({"owner__id__exact": budget.user_id})
        url = reverse("admin:reports_task_changelist") + "?" + query
        return format_html('<a href="{}">Tasks of {}</a>', url, budget.user)

    def save_model(self, request, obj, form, change) -> None:
        limit = form.limit_micros
        if not change:
            obj.limit_micros = limit
            obj.save()
            return
        # Conditional, and only the limit: spent and reserved may have moved since the
        # form was read, and are never written from it.
        within = Budget.objects.filter(
            pk=obj.pk, spent_micros__lte=limit - F("reserved_micros")
        ).update(limit_micros=limit)
        if not within:
            self.message_user(
                request,
                "The limit was not changed: spent and reserved now add up to more.",
                messages.ERROR,
            )

    @admin.action(description="Start a new period (spent back to zero)", permissions=["change"])
    def start_new_period(self, request, queryset) -> None:
        count = queryset.update(spent_micros=0)
        self.message_user(request, f"{count} budget(s) start a new period.", messages.SUCCESS)


class SettleForm(forms.Form):
    """The unknown part's usage, from the provider's records; blank accepts the reservation."""

    input_tokens = forms.IntegerField(min_value=0, required=False)
    output_tokens = forms.IntegerField(min_value=0, required=False)
    cached_tokens = forms.IntegerField(min_value=0, required=False)

    def unknown_cost(self, task: Task) -> int:
        data = self.cleaned_data
        if data["input_tokens"] is None and data["output_tokens"] is None:
            return budgets.unknown_cost_at_reservation(task.pk)
        return budgets.usage_cost(
            task.model, data["input_tokens"] or 0, data["output_tokens"] or 0, data["cached_tokens"]
        )


class CorrectForm(forms.Form):
    """The estimated attempt's usage, from the provider's records."""

    input_tokens = forms.IntegerField(min_value=0, max_value=10**9)
    output_tokens = forms.IntegerField(min_value=0, max_value=10**9)
    cached_tokens = forms.IntegerField(min_value=0, max_value=10**9, required=False)


def settle_page(model_admin, request, task_id):
    """Settle a task whose usage is unknown; a task in reconciliation also ends failed.
    A task settled at an estimate is corrected here too (`correct_page`)."""
    if not model_admin.has_operate_permission(request):
        raise PermissionDenied
    task = get_object_or_404(Task, pk=task_id)
    back = reverse("admin:reports_task_change", args=[task.pk])
    estimated = budgets.estimated_attempt(task.pk)
    if estimated is not None:
        return correct_page(model_admin, request, task, estimated, back)
    if task.cost_status != CostStatus.PENDING_RECONCILIATION:
        model_admin.message_user(
            request, f"Nothing to settle: the cost is {task.cost_status}.", messages.WARNING
        )
        return redirect(back)
    form = SettleForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        unknown = form.unknown_cost(task)
        if task.status == Status.RECONCILIATION_REQUIRED:
            done = resolve_reconciliation(
                task.pk, Status.FAILED, by_user=request.user, unknown_cost=unknown
            )
        else:
            done = budgets.settle_pending(task.pk, unknown)
        if done is None:
            model_admin.message_user(
                request, "Nothing settled: someone resolved this task first.", messages.WARNING
            )
        else:
            task.refresh_from_db()
            model_admin.message_user(
                request,
                f"Settled at {budgets.usd(task.cost_micros, exact=True)} ({task.cost_status}).",
                messages.SUCCESS,
            )
        return redirect(back)
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": Task._meta,
        "title": "Settle the unknown cost",
        "task": task,
        "form": form,
        "reserved": budgets.usd(task.reserved_micros, exact=True),
        "in_reconciliation": task.status == Status.RECONCILIATION_REQUIRED,
    }
    return TemplateResponse(request, "admin/reports/task/settle.html", context)


def correct_page(model_admin, request, task: Task, attempt, back: str):
    """Replace the estimate a settled task's attempt was charged at with its real usage."""
    form = CorrectForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        cost = budgets.correct_estimate(
            task.pk, data["input_tokens"], data["output_tokens"], data["cached_tokens"]
        )
        if cost is None:
            model_admin.message_user(
                request, "Nothing corrected: the estimate was corrected first.", messages.WARNING
            )
        else:
            model_admin.message_user(
                request,
                f"Corrected: the task cost {budgets.usd(cost, exact=True)}.",
                messages.SUCCESS,
            )
        return redirect(back)
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": Task._meta,
        "title": "Correct the estimated cost",
        "task": task,
        "form": form,
        "attempt": attempt,
        "estimate": budgets.usd(attempt.cost_micros or 0, exact=True),
        "correcting": True,
    }
    return TemplateResponse(request, "admin/reports/task/settle.html", context)
