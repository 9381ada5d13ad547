"""Read-only share links of a finished report: only a digest of each link's token is kept.
Re-exported from reports.models, where Django finds them.

A link's life is measured by `now`: a test puts a clock that it moves there (for example
`reports.clock.FakeClock().wall`), to go past an expiry.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import models
from django.utils import timezone

from reports.models.tasks import Task

now: Callable[[], datetime] = timezone.now


class ShareLinkQuerySet(models.QuerySet):
    def live(self) -> ShareLinkQuerySet:
        """The links that still open their report: not revoked, not expired."""
        return self.filter(revoked_at__isnull=True, expires_at__gt=now())

    def revoke(self) -> int:
        return self.live().update(revoked_at=now())

    def issue(self, task, days: int) -> tuple[str, ShareLink]:
        """Create a link to `task`'s report for `days` days; return its token (only its
        digest is stored) and the link."""
        token = secrets.token_urlsafe(32)  # 256 random bits
        created = now()
        link = self.create(
            task=task,
            token_hash=ShareLink.digest_of(token),
            created_at=created,
            expires_at=created + timedelta(days=days),
        )
        return token, link

    def opened_by(self, token: str):
        """Return the live link `token` opens, or None (unknown, revoked, expired alike)."""
        digest = ShareLink.digest_of(token)
        return self.live().select_related("task").filter(token_hash=digest).first()


class ShareLink(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="share_links")
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
