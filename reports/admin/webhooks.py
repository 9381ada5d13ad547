"""Webhook endpoints and their delivery attempts, read-only; a task's deliveries show
inline on its page. Secrets are never shown."""

from __future__ import annotations

from django.contrib import admin

from reports.admin.inlines import DELIVERY_FIELDS
from reports.admin.tasks import ReadOnlyAdmin, UuidSearchMixin
from reports.models import WebhookDelivery, WebhookEndpoint


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


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(UuidSearchMixin, ReadOnlyAdmin):
    list_display = ("id", "task", "event_type", "status", "attempts", "last_status_code")
    list_filter = ("status", "event_type")
    list_select_related = ("task", "endpoint")
    fields = readonly_fields = ("task", *DELIVERY_FIELDS, "body")
    ordering = ("-created_at",)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
