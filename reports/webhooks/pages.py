"""The settings page of a user's webhooks: add one (its secret shown once), give one a new
secret (shown once too), remove one, and see why one was disabled."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from reports.auth import ApiError
from reports.webhooks import endpoints, sealing

CREATED = "webhook_created"


@never_cache  # it may show a new secret
@login_required
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    # A new secret goes through the session to the page the POST redirects to, shown there
    # once: reloading that page then neither shows it again nor adds another.
    context = {"error": None, "created": _shown_once(request), "url": ""}
    status, headers = 200, {}
    if request.method == "POST":
        url = request.POST.get("url", "")
        try:
            created = endpoints.register(request.user, url)
        except endpoints.Invalid as exc:
            context.update(error=str(exc), url=url[:2000])
            status = 400
        except ApiError as exc:  # too many tries, or their count out of reach
            context.update(error=exc.message, url=url[:2000])
            status, headers = exc.status, exc.headers
        else:
            _show_once(request, created, renewed=False)
            return redirect("settings-webhooks")
    context["webhooks"] = endpoints.listing(request.user)
    response = render(request, "reports/webhooks.html", context, status=status)
    for name, value in headers.items():
        response[name] = value
    return response


@login_required
@require_POST
def new_secret(request: HttpRequest, webhook_id: str) -> HttpResponse:
    endpoint = endpoints.new_secret_for(request.user, webhook_id)
    if endpoint is None:
        raise Http404("No such webhook.")
    _show_once(request, endpoint, renewed=True)
    return redirect("settings-webhooks")


def _show_once(request: HttpRequest, endpoint, renewed: bool) -> None:
    # Still sealed in the session, which is stored in the database too.
    request.session[CREATED] = {
        "url": endpoint.url,
        "sealed": endpoint.sealed_secret,
        "renewed": renewed,
    }


def _shown_once(request: HttpRequest) -> dict | None:
    shown = request.session.pop(CREATED, None)
    if shown is None:
        return None
    try:
        secret = sealing.unseal(shown["sealed"])
    except (sealing.Unreadable, KeyError):  # the key changed since, or an older session
        return None
    return {"url": shown["url"], "secret": secret, "renewed": shown.get("renewed", False)}


@login_required
@require_POST
def remove(request: HttpRequest, webhook_id: str) -> HttpResponse:
    if not endpoints.remove(request.user, webhook_id):
        raise Http404("No such webhook.")
    return redirect("settings-webhooks")
