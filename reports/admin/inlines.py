"""A task's documents and attempts shown read-only inside its admin page,
and the formatting of their figures."""

from __future__ import annotations

from django.contrib import admin
from django.db.models.functions import Length, Substr

from reports import budgets
from reports.models import STAGES, Attempt, Document, ShareLink, WebhookDelivery
from reports.observability.charts import format_ms

PREVIEW_CHARS = 200


def format_stages(stage_ms: dict) -> str:
    """Return 'parse 2 ms · prepare 1 ms · generate 3.2 s · …' in pipeline order."""
    known = [s for s in STAGES if s in stage_ms]
    others = sorted(s for s in stage_ms if s not in STAGES)
    return " · ".join(f"{s} {format_ms(stage_ms[s])}" for s in known + others) or "-"


def format_cost(micros: int | None) -> str:
    return "unknown" if micros is None else budgets.usd(micros, exact=True)


def truncate(text: str, limit: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ReadOnlyInline:
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class DocumentInline(ReadOnlyInline, admin.TabularInline):
    model = Document
    fields = readonly_fields = ("name", "size", "sha256")


class AttemptInline(ReadOnlyInline, admin.StackedInline):
    model = Attempt
    show_change_link = True  # the attempt's page has its whole text
    fields = readonly_fields = (
        "number",
        "status",
        "error_type",
        "error_message",
        "started_at",
        "ended_at",
        "first_text",
        "stages",
        "usage",
        "cost",
        "provider_request_id",
        "prompt_version",
        "text_length",
        "text_preview",
    )

    def get_queryset(self, request):
        # The full text of every attempt can be hundreds of KB: read its length and head.
        return (
            super()
            .get_queryset(request)
            .defer("text")
            .annotate(text_chars=Length("text"), text_head=Substr("text", 1, PREVIEW_CHARS + 1))
        )

    @admin.display(description="first text")
    def first_text(self, attempt: Attempt) -> str:
        return format_ms(attempt.first_text_ms)

    @admin.display(description="stage durations")
    def stages(self, attempt: Attempt) -> str:
        return format_stages(attempt.stage_ms)

    @admin.display(description="usage")
    def usage(self, attempt: Attempt) -> str:
        def count(n):
            return "?" if n is None else str(n)

        return (
            f"in {count(attempt.input_tokens)} · out {count(attempt.output_tokens)} · "
            f"cached {count(attempt.cached_tokens)} ({attempt.usage_source or 'none'})"
        )

    @admin.display(description="cost")
    def cost(self, attempt: Attempt) -> str:
        return format_cost(attempt.cost_micros)

    @admin.display(description="text length")
    def text_length(self, attempt: Attempt) -> int:
        return attempt.text_chars

    @admin.display(description="text preview")
    def text_preview(self, attempt: Attempt) -> str:
        return truncate(attempt.text_head) or "-"


class ShareLinkInline(ReadOnlyInline, admin.TabularInline):
    """The report's share links: when each was made, expires and was revoked; never the
    digest of its token."""

    model = ShareLink
    fields = readonly_fields = ("created_at", "expires_at", "revoked_at")


DELIVERY_FIELDS = (
    "id",
    "endpoint",
    "event_type",
    "status",
    "attempts",
    "next_attempt_at",
    "last_status_code",
    "last_error",
    "created_at",
    "delivered_at",
)


class WebhookDeliveryInline(ReadOnlyInline, admin.TabularInline):
    model = WebhookDelivery
    fields = readonly_fields = DELIVERY_FIELDS
    verbose_name_plural = "webhook deliveries"
    show_change_link = True  # the delivery's page has the body that was sent

    def get_queryset(self, request):
        # Each row names its endpoint: one query for all of them, not one a row.
        return super().get_queryset(request).select_related("endpoint").defer("body")
