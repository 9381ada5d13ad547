"""Django's ASGI handler, with one trip to a thread for a request to a synchronous view.

Under ASGI, Django runs its middleware in async mode: each hook of each middleware (a
dozen of them) that is synchronous is its own trip from the event loop to the request's
thread and back, and while the loop serves the streams every trip waits for it. A
reloaded task page waited about 15 ms of its 40 on the server that way (benchmark 5).
Every page, form and API call has a synchronous view: for those, the middleware and the
view run in sync mode, in one trip. An asynchronous view (the event stream, the health
checks) keeps Django's async chain, so it never holds a thread while it waits.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.urls import Resolver404, resolve


class Handler(ASGIHandler):
    def __init__(self) -> None:
        super().__init__()
        self.in_one_trip = BaseHandler()
        self.in_one_trip.load_middleware(is_async=False)

    async def get_response_async(self, request):
        if is_async_view(request.path_info):
            return await super().get_response_async(request)
        get_response = sync_to_async(self.in_one_trip.get_response, thread_sensitive=True)
        return await get_response(request)


def is_async_view(path: str) -> bool:
    """Return whether `path` is served by an asynchronous view (a missing one is not)."""
    try:
        view = resolve(path).func
    except Resolver404:
        return False
    return bool(getattr(view, "view_is_async", False)) or iscoroutinefunction(view)
