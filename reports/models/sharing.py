"""Read-only share links of a finished report: only a digest of each link's token is kept.
Re-exported from reports.models, where Django finds them."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.db import models


class ShareLinkQuerySet(models.QuerySet):
    def live(self, now: datetime) -> ShareLinkQuerySet:
        """The links that still open their report at `now`: not revoked, not expired."""
        return self.filter(revoked_at__isnull=True, expires_at__gt=now)

    def issue(self, task, *, created_at: datetime, expires_at: datetime) -> tuple[str, ShareLink]:
        """Create a link to `task`'s report; return its token (only its digest is stored)."""
        token = secrets.token_urlsafe(32)  # 256 random bits
        link = self.create(
            task=task,
            token_hash=ShareLink.digest_of(token),
            created_at=created_at,
            expires_at=expires_at,
        )
        return token, link

    def opened_by(self, token: str, now: datetime):
        """Return the live link `token` opens, or None (unknown, revoked, expired alike)."""
        digest = ShareLink.digest_of(token)
        return self.live(now).select_related("task").filter(token_hash=digest).first()


class ShareLink(models.Model):
    task = models.ForeignKey("reports.Task", on_delete=models.CASCADE, related_name="share_links")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ShareLinkQuerySet.as_manager()

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"share link of task {self.task_id}, created {self.created_at:%Y-%m-%d %H:%M}"

    @staticmethod
    def digest_of(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()
