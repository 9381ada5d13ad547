"""The page a form refused by its CSRF check answers with (`CSRF_FAILURE_VIEW`).

Such a form was almost always left open while its session changed: the user signed in
again in another tab (which makes a new token) or was signed out. Django's own page says
only "CSRF verification failed"; this one is the product's 403 page, saying what happened
and what to do. The JSON API answers its own 403 `csrf_failed` (`reports.auth`).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

STALE_FORM = (
    "This form was out of date, so nothing was done: you signed in again in another tab, "
    "or your session ended. Go back, reload the page and try again."
)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    return render(request, "403.html", {"lead": STALE_FORM}, status=403)
