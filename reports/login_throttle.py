"""Login throttling: after a few failed logins for one username from one address, refuse
further attempts (even with the right password) for a while.

Failures are counted in Django's cache, per username and client address. With the
default local-memory cache each process counts its own; set `REDIS_URL` (the cache then
lives in Redis) so that all web processes share the count.
"""

from __future__ import annotations

import hashlib
import math
import time

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.forms.forms import NON_FIELD_ERRORS

THROTTLED = "throttled"


def _keys(request, username: str) -> tuple[str, str]:
    address = request.META.get("REMOTE_ADDR", "") if request is not None else ""
    # Stripped and case-folded: the form strips the name, so " alice" is alice too.
    name = username.strip().casefold()
    digest = hashlib.sha256(f"{name}\n{address}".encode()).hexdigest()
    return f"login-failures:{digest}", f"login-failures-since:{digest}"


def wait_s(request, username: str) -> int:
    """Return how many seconds this username must wait from this address (0: none)."""
    count_key, since_key = _keys(request, username)
    if (cache.get(count_key) or 0) < settings.REPORTS_LOGIN_MAX_FAILURES:
        return 0
    since = cache.get(since_key) or time.time()
    return max(1, math.ceil(since + settings.REPORTS_LOGIN_LOCKOUT_S - time.time()))


def record_failure(request, username: str) -> None:
    count_key, since_key = _keys(request, username)
    window = settings.REPORTS_LOGIN_LOCKOUT_S
    cache.add(since_key, time.time(), window)
    cache.add(count_key, 0, window)
    try:
        cache.incr(count_key)
    except ValueError:  # expired between add and incr
        cache.set(count_key, 1, window)


def forget_failures(request, username: str) -> None:
    cache.delete_many(_keys(request, username))


class ThrottledLoginMixin:
    """Check the throttle before the password, and count every failure."""

    def clean(self):
        username = self.data.get("username", "")
        wait = wait_s(self.request, username)
        if wait:
            raise ValidationError(
                f"Too many failed logins. Try again in {math.ceil(wait / 60)} minute(s).",
                code=THROTTLED,
            )
        try:
            cleaned = super().clean()
        except ValidationError:
            record_failure(self.request, username)
            raise
        forget_failures(self.request, username)
        return cleaned


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    pass


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    pass


class ThrottledLoginView(LoginView):
    """Django's login view with the throttle; a throttled attempt answers 429."""

    authentication_form = ThrottledAuthenticationForm

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.has_error(NON_FIELD_ERRORS, THROTTLED):
            response.status_code = 429
        return response
