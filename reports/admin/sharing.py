"""Share links of reports, read-only but for revoking them; never the digest of a token."""

from __future__ import annotations

from django.contrib import admin, messages

from reports.admin.tasks import ReadOnlyAdmin, UuidSearchMixin
from reports.models import ShareLink
from reports.models.sharing import now


@admin.register(ShareLink)
class ShareLinkAdmin(UuidSearchMixin, ReadOnlyAdmin):
    list_display = ("task", "owner", "created_at", "expires_at", "revoked_at", "live")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    list_select_related = ("task__owner",)
    search_fields = ("task__owner__username",)
    search_help_text = "A task id (exact) or its owner's username."
    uuid_search_fields = ("task_id",)
    fields = readonly_fields = ("task", "owner", "created_at", "expires_at", "revoked_at", "live")
    actions = ("revoke",)

    def get_queryset(self, request):
        return super().get_queryset(request).defer("task__report_html")

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # revoked, a link stays as the record of who could read the report

    @admin.display(description="owner")
    def owner(self, link: ShareLink) -> str:
        return link.task.owner.get_username()

    @admin.display(description="opens the report", boolean=True)
    def live(self, link: ShareLink) -> bool:
        return link.revoked_at is None and link.expires_at > now()

    @admin.action(description="Revoke selected share links", permissions=["operate"])
    def revoke(self, request, queryset) -> None:
        selected = queryset.count()
        revoked = queryset.revoke()
        self.message_user(
            request,
            f"{revoked} share link(s) revoked; {selected - revoked} already revoked or expired.",
            messages.SUCCESS if revoked == selected else messages.WARNING,
        )
