"""Who is calling the JSON API: a browser session (with CSRF) or a personal token."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.db import OperationalError
from django.http import HttpRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.http.request import RawPostDataException
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from reports import upload_limits
from reports.models import ApiToken, Task
from reports.serving import upload_names
from reports.serving.errors import json_error
from reports.upload_limits import MB

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error answered as docs/api.md's body: {"error": {"code", "message"}}."""

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}

    def response(self) -> JsonResponse:
        return json_error(self.status, self.code, self.message, self.headers)


NOT_FOUND = (404, "not_found", "No such task.")
STORAGE_RETRY_AFTER_S = 5  # a file store out of reach: ask again as soon as for the database


def storage_unavailable(store: str) -> ApiError:
    """Return the 503 of a file store out of reach; `store` names it as the user knows it."""
    return ApiError(
        503,
        "storage_unavailable",
        f"The {store} cannot be reached; try again in {STORAGE_RETRY_AFTER_S} s.",
        {"Retry-After": str(STORAGE_RETRY_AFTER_S)},
    )


def bearer_token(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


def authenticate(request: HttpRequest):
    """Return the calling user, or raise ApiError 401. Session callers must pass CSRF."""
    token = bearer_token(request)
    if token is not None:
        user = ApiToken.objects.user_for(token)
        if user is None:
            raise _unauthenticated("The token is not valid.")
        return user
    if request.user.is_authenticated:
        if request.method not in SAFE_METHODS:
            reason = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
            if reason is not None:
                # A form whose upload was stopped may have lost its token with the rest.
                raise_if_upload_stopped(request)
                raise ApiError(403, "csrf_failed", "CSRF check failed; reload the page.")
        return request.user
    raise _unauthenticated("Log in, or send a token as 'Authorization: Bearer <token>'.")


def raise_if_upload_stopped(request: HttpRequest) -> None:
    """Raise the 413 of an upload the limits stopped (reports.upload_limits)."""
    message = upload_limits.stopped(request)
    if message is not None:
        raise ApiError(413, "file_too_large", message)


def _unauthenticated(message: str) -> ApiError:
    return ApiError(401, "unauthenticated", message, {"WWW-Authenticate": "Bearer"})


def check_content_length(request: HttpRequest) -> None:
    """Refuse an oversized request from its Content-Length, before its body is read.

    This comes before authentication on purpose: the CSRF check of a session caller
    would otherwise parse (and spool to disk) the whole body first.
    """
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise ApiError(400, "invalid_request", "Content-Length is not a number.") from None
    if length > settings.REPORTS_MAX_REQUEST_MB * MB:
        raise ApiError(
            413,
            "file_too_large",
            f"The upload is over the limit of {settings.REPORTS_MAX_REQUEST_MB:g} MB a request.",
        )


def json_object(request: HttpRequest, max_bytes: int, usage: str) -> dict:
    """Return a small JSON body as an object, or raise a 400 that says `usage` (how to send
    it). Refused from its Content-Length (a number, by `check_content_length`) when it is
    over `max_bytes`, before it is read."""
    if int(request.META.get("CONTENT_LENGTH") or 0) > max_bytes:
        raise ApiError(400, "invalid_request", f"The body is over {max_bytes:,} bytes.")
    try:
        # RawPostDataException: a form body, already parsed by a session caller's CSRF check.
        body = json.loads(request.body)
    except (ValueError, RawPostDataException):
        body = None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_request", usage)
    return body


def api_view(methods: set[str]) -> Callable:
    """Make a JSON view: allowed methods, authentication, every error answered as JSON.
    (No cache keeps an answer: `reports.serving.middleware` marks every one `no-store`.)"""

    def decorate(view):
        @csrf_exempt  # checked in authenticate(), for session callers only
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            return _answer(view, methods, request, *args, **kwargs)

        return wrapper

    return decorate


def _answer(view, methods: set[str], request, *args, **kwargs):
    try:
        if request.method not in methods:
            raise ApiError(
                405,
                "method_not_allowed",
                f"Use {' or '.join(sorted(methods))}.",
                {"Allow": ", ".join(sorted(methods))},
            )
        check_content_length(request)
        upload_limits.install(request)
        upload_names.install(request)
        user = authenticate(request)
        return view(request, user, *args, **kwargs)
    except ApiError as exc:
        return exc.response()
    # Django's own upload limits, raised when the body is parsed (by the CSRF
    # check or by the view): answered as docs/api.md errors, not as an HTML 400.
    except (TooManyFilesSent, RequestDataTooBig):
        return ApiError(
            413, "file_too_large", "The request has too many files or is too large."
        ).response()
    except TooManyFieldsSent:
        return ApiError(400, "invalid_request", "The request has too many fields.").response()
    except MultiPartParserError as exc:
        return ApiError(
            400, "invalid_request", f"The upload could not be read as a form: {exc}"
        ).response()
    except OperationalError:
        raise  # the database is out of reach: the middleware answers 503 database_unavailable
    except Exception:
        # A bug must not answer a script with Django's HTML error page.
        log.exception("unexpected error in %s", request.path)
        return ApiError(
            500, "internal_error", "Something went wrong on our side; try again later."
        ).response()


def owned_task(user, task_id: str) -> Task:
    """Return the caller's task, or raise the same 404 as for a task that does not exist."""
    task = Task.objects.owned(user, task_id)
    if task is None:
        raise ApiError(*NOT_FOUND)
    return task
