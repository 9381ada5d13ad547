"""What belongs to a user rather than to a task: API tokens (stored as digests) and the
spending budget. Re-exported from reports.models, where Django finds them."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now


class ApiTokenQuerySet(models.QuerySet):
    def issue(self, user, label: str = "") -> str:
        """Create a token for `user` and return it; only its digest is stored."""
        token = "rl_" + secrets.token_urlsafe(32)
        self.create(user=user, digest=ApiToken.digest_of(token), label=label)
        return token

    def user_for(self, token: str):
        found = self.select_related("user").filter(digest=ApiToken.digest_of(token)).first()
        if found is None or not found.user.is_active:
            return None
        self.filter(pk=found.pk).update(last_used_at=Now())
        return found.user


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    digest = models.CharField(max_length=64, unique=True)
    label = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    def __str__(self) -> str:
        return f"token {self.digest[:8]}… of {self.user}"

    @staticmethod
    def digest_of(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()


class Budget(models.Model):
    """What a user may spend, in micro-dollars; reports/budgets.py moves the money."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="budget"
    )
    limit_micros = models.PositiveBigIntegerField()
    spent_micros = models.PositiveBigIntegerField(default=0)
    reserved_micros = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(spent_micros__gte=0)
                & Q(reserved_micros__gte=0)
                & Q(limit_micros__gte=F("spent_micros") + F("reserved_micros")),
                name="budget_within_limit",
            )
        ]

    def __str__(self) -> str:
        return f"budget of {self.user}"

    @property
    def remaining_micros(self) -> int:
        return self.limit_micros - self.spent_micros - self.reserved_micros
