"""The SSE event stream of a task (docs/api.md): replay after the client's seq, then live.

While it is open, the token or session that opened it is checked again, with every other
open stream's credential (`reports.streaming.credentials`); once it no longer holds (the
token revoked, the session ended), the stream ends, as a stopping process's does, and the
client's next request is answered 401.
"""

from __future__ import annotations

import asyncio
import json

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from reports.auth import ApiError, authenticate, bearer_token, owned_task
from reports.models import TERMINAL, ApiToken, Task
from reports.serving.stopping import long_lived
from reports.streaming import credentials, follower, limits

KEEPALIVE_S = 15.0
# Sent first, so that the headers leave at once on every server (daphne holds them
# until the first body bytes): a keep-alive comment, which clients ignore.
OPENING = b": ping\n\n"


def resume_point(request: HttpRequest) -> int:
    """Return the seq to resume after; Last-Event-ID wins over ?after=."""
    raw = request.headers.get("Last-Event-ID")
    if raw is None:
        raw = request.GET.get("after", "0")
    after = follower.read_seq(raw)
    if after is None:
        raise ApiError(400, "invalid_request", "The resume point must be a non-negative integer.")
    return after


def credential_of(request: HttpRequest, user) -> credentials.Credential:
    """Return what let an authenticated request in: its token, else its session."""
    token = bearer_token(request)
    if token is not None:
        return credentials.TokenCredential(ApiToken.digest_of(token))
    return credentials.SessionCredential(request.session.session_key, user.pk)


def _authorise_events(
    request: HttpRequest, task_id
) -> tuple[Task, int, object, credentials.Credential]:
    user = authenticate(request)
    task, after = owned_task(user, task_id), resume_point(request)
    return task, after, user, credential_of(request, user)


@csrf_exempt  # it only reads; a POST is answered 405 below, as JSON, not the CSRF page
@long_lived
async def events(request: HttpRequest, task_id) -> HttpResponse:
    if request.method != "GET":
        return ApiError(405, "method_not_allowed", "Use GET.", {"Allow": "GET"}).response()
    try:
        # Off the request's own thread: its connection would stay open with the stream.
        task, after, user, credential = await follower.off_request(
            _authorise_events, request, task_id
        )
    except ApiError as exc:
        return exc.response()
    if task.status in TERMINAL and after >= task.last_seq:
        # Nothing will ever follow: 204 is what makes an EventSource stop reconnecting
        # (docs/api.md), where an empty 200 stream would have it reconnect forever.
        return HttpResponse(status=204)
    # No event past the task's last one exists yet; a cursor beyond it would skip the
    # task's end, and the stream would hold its slot for ever. Resume from the last one.
    after = min(after, task.last_seq)
    slot = limits.take_slot(user)
    if slot is None:
        return ApiError(
            429,
            "too_many_streams",
            "Too many open streams for this account; close a page or a stream and retry.",
            {"Retry-After": "5"},
        ).response()
    response = EventStreamResponse(sse_stream(task.pk, after, credential), slot)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


class EventStreamResponse(StreamingHttpResponse):
    """An event stream that holds one of its user's stream slots until it is closed
    (every server closes a response when it ends, however it ended)."""

    def __init__(self, stream, slot: limits.StreamSlot) -> None:
        super().__init__(stream, content_type="text/event-stream; charset=utf-8")
        self.slot = slot

    def close(self) -> None:
        self.slot.release()
        super().close()


class _Watched:
    """An open event stream, as the credentials' checks see it: once what opened it no
    longer holds, it is marked ended and woken, and it ends."""

    __slots__ = ("__weakref__", "credential", "ended", "wake")

    def __init__(self, credential: credentials.Credential, wake) -> None:
        self.credential, self.wake, self.ended = credential, wake, False

    async def credential_ended(self) -> None:
        self.ended = True
        self.wake()


async def sse_stream(task_id, after: int, credential: credentials.Credential):
    ready = asyncio.Event()
    yield OPENING
    watched = _Watched(credential, ready.set)
    subscription = await follower.subscribe(task_id, after, ready.set)
    credentials.watch(watched)
    try:
        while True:
            ready.clear()  # before taking: what arrives from now on sets it again
            if watched.ended:
                return  # its token was revoked or its session ended: not one event more
            for event in subscription.take():
                data = json.dumps(event.data, ensure_ascii=False, separators=(",", ":"))
                yield f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n".encode()
            if subscription.finished and not subscription.pending:
                return
            try:
                await asyncio.wait_for(ready.wait(), KEEPALIVE_S)
            except TimeoutError:
                yield b": ping\n\n"
    finally:
        credentials.forget(watched)
        subscription.close()
