"""Who is calling the JSON API: a browser session (with CSRF) or a personal token."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.http import HttpRequest, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from reports.models import ApiToken

SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


class ApiError(Exception):
    """An error answered as SPEC §3's body: {"error": {"code", "message"}}."""

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}

    def response(self) -> JsonResponse:
        response = JsonResponse(
            {"error": {"code": self.code, "message": self.message}}, status=self.status
        )
        for name, value in self.headers.items():
            response[name] = value
        return response


NOT_FOUND = (404, "not_found", "No such task.")


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
                raise ApiError(403, "csrf_failed", "CSRF check failed; reload the page.")
        return request.user
    raise _unauthenticated("Log in, or send a token as 'Authorization: Bearer <token>'.")


def _unauthenticated(message: str) -> ApiError:
    return ApiError(401, "unauthenticated", message, {"WWW-Authenticate": "Bearer"})


def api_view(methods: set[str]) -> Callable:
    """Make a JSON view: allowed methods, authentication, and ApiError answered as JSON."""

    def decorate(view):
        @csrf_exempt  # checked in authenticate(), for session callers only
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            try:
                if request.method not in methods:
                    raise ApiError(
                        405,
                        "method_not_allowed",
                        f"Use {' or '.join(sorted(methods))}.",
                        {"Allow": ", ".join(sorted(methods))},
                    )
                user = authenticate(request)
                return view(request, user, *args, **kwargs)
            except ApiError as exc:
                return exc.response()

        return wrapper

    return decorate
