"""Webhook endpoints and their delivery attempts, read-only but for disabling an endpoint;
a task's deliveries show inline on its page. Secrets are never shown."""

from __future__ import annotations

from django.contrib import admin, messages

from reports.admin.inlines import DELIVERY_FIELDS
from reports.admin.tasks import ReadOnlyAdmin, UuidSearchMixin
from reports.models import WebhookDelivery, WebhookEndpoint
from reports.webhooks.delivery import disable_endpoints


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(UuidSearchMixin, ReadOnlyAdmin):
    list_display = ("url", "user", "created_at", "disabled_at", "consecutive_failures")
    list_filter = (("disabled_at", admin.EmptyFieldListFilter),)
    list_select_related = ("user",)
    search_fields = ("user__username", "url")
    fields = readonly_fields = (
        "id",
        "user",
        "url",
        "created_at",
        "disabled_at",
        "disabled_reason",
        "consecutive_failures",
    )
    actions = ("disable",)

    @admin.action(description="Disable selected endpoints", permissions=["operate"])
    def disable(self, request, queryset) -> None:
        selected = queryset.count()
        reason = f"Disabled by an administrator ({request.user.get_username()})."
        disabled = disable_endpoints(queryset, reason)
        self.message_user(
            request,
            f"{disabled} endpoint(s) disabled, their waiting deliveries failed; "
            f"{selected - disabled} already disabled.",
            messages.SUCCESS if disabled == selected else messages.WARNING,
        )


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(UuidSearchMixin, ReadOnlyAdmin):
    list_display = ("id", "task", "event_type", "status", "attempts", "last_status_code")
    list_filter = ("status", "event_type")
    list_select_related = ("task", "endpoint")
    search_fields = ("endpoint__url", "endpoint__user__username")
    search_help_text = (
        "A delivery's id (the webhook-id its receiver got), its task's or its endpoint's id "
        "(exact); or an endpoint's URL or its owner's username."
    )
    uuid_search_fields = ("pk", "task_id", "endpoint_id")
    fields = readonly_fields = ("task", *DELIVERY_FIELDS, "body")
    ordering = ("-created_at",)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
