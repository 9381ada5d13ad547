"""Login throttling: after a few failed logins for one account from one address, refuse
further attempts (even with the right password) for a while.

Failures are counted in Django's cache, per account and client address. The account is
found from the name as the login form reads it (stripped, NFKC-normalised, as Django's
`UsernameField` does), so look-alike spellings such as fullwidth or mathematical letters
share one count; a name with no account is counted by its normalised, case-folded form.
With the default local-memory cache each process counts its own; set `REDIS_URL` (the
cache then lives in Redis) so that all web processes share the count. When the cache
cannot be reached, logins are refused with 503 rather than let through uncounted.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
import unicodedata
from contextlib import contextmanager

from django.conf import settings
from django.contrib.admin import AdminSite
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.forms.forms import NON_FIELD_ERRORS

from reports.serving.throttle import UNAVAILABLE

THROTTLED = "throttled"
log = logging.getLogger(__name__)


def login_name(raw: str) -> str:
    """Return the name the login form authenticates: stripped, then NFKC-normalised."""
    return unicodedata.normalize("NFKC", raw.strip())


def account_key(raw: str) -> str:
    """Return what failures are counted against: the account the name reaches, if any."""
    name = login_name(raw)
    user_model = get_user_model()
    account = (
        user_model._default_manager.filter(**{user_model.USERNAME_FIELD: name})
        .values_list("pk", flat=True)
        .first()
    )
    if account is not None:
        return f"account:{account}"
    return f"name:{unicodedata.normalize('NFKC', name.casefold())}"


def _keys(request, username: str) -> tuple[str, str]:
    address = request.META.get("REMOTE_ADDR", "") if request is not None else ""
    digest = hashlib.sha256(f"{account_key(username)}\n{address}".encode()).hexdigest()
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


@contextmanager
def _count_reachable():
    """Turn a cache that cannot be reached (Redis down) into a refusal: never let a login
    through uncounted, and never answer it with a 500."""
    try:
        yield
    except Exception:  # each cache backend raises its own connection errors
        log.exception("login throttle: the count of failed logins is out of reach")
        raise ValidationError(
            "Logging in is unavailable for a moment; try again shortly.", code=UNAVAILABLE
        ) from None


class ThrottledLoginMixin:
    """Check the throttle before the password, and count every failure."""

    def clean(self):
        username = self.data.get("username", "")
        with _count_reachable():
            wait = wait_s(self.request, username)
        if wait:
            raise ValidationError(
                f"Too many failed logins. Try again in {math.ceil(wait / 60)} minute(s).",
                code=THROTTLED,
            )
        try:
            cleaned = super().clean()
        except ValidationError:
            with _count_reachable():
                record_failure(self.request, username)
            raise
        with _count_reachable():
            forget_failures(self.request, username)
        return cleaned


class ThrottledAuthenticationForm(ThrottledLoginMixin, AuthenticationForm):
    """The site's login form. Its refusals are the form's, not a field's, so Django ties
    them to no field: each field is described by the refusal (the template's
    `#login-error`), and marked invalid when the name or the password was wrong."""

    def full_clean(self):
        super().full_clean()
        if not self.non_field_errors():
            return
        for name in ("username", "password"):
            attrs = self.fields[name].widget.attrs
            attrs["aria-describedby"] = "login-error"
            if self.has_error(NON_FIELD_ERRORS, "invalid_login"):
                attrs["aria-invalid"] = "true"


class ThrottledAdminAuthenticationForm(ThrottledLoginMixin, AdminAuthenticationForm):
    pass


class ThrottledAdminSite(AdminSite):
    """Django's admin site, its login throttled like the site's: the default admin site
    (`reports.apps.AdminConfig`)."""

    login_form = ThrottledAdminAuthenticationForm


class ThrottledLoginView(LoginView):
    """Django's login view with the throttle; a throttled attempt answers 429."""

    authentication_form = ThrottledAuthenticationForm

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.has_error(NON_FIELD_ERRORS, THROTTLED):
            response.status_code = 429
        elif form.has_error(NON_FIELD_ERRORS, UNAVAILABLE):
            response.status_code = 503
        return response
