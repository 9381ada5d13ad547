"""The SSE event stream of a task (docs/api.md): replay after the client's seq, then live."""

from __future__ import annotations

import asyncio
import json

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from reports.auth import ApiError, authenticate, owned_task
from reports.models import TERMINAL, Task
from reports.serving.stopping import long_lived
from reports.streaming import follower, limits

KEEPALIVE_S = 15.0
# Sent first, so that the headers leave at once on every server (daphne holds them
# until the first body bytes): a keep-alive comment, which clients ignore.
OPENING = b": ping\n\n"


def resume_point(request: HttpRequest) -> int:
    """Return the seq to resume after; Last-Event-ID wins over ?after=."""
    raw = request.headers.get("Last-Event-ID")
    if raw is None:
        raw = request.GET.get("after", "0")
    if not raw.isdigit() or not raw.isascii():
        raise ApiError(400, "invalid_request", "The resume point must be a non-negative integer.")
    return int(raw)


def _authorise_events(request: HttpRequest, task_id) -> tuple[Task, int, object]:
    user = authenticate(request)
    return owned_task(user, task_id), resume_point(request), user


@long_lived
async def events(request: HttpRequest, task_id) -> HttpResponse:
    if request.method != "GET":
        return ApiError(405, "method_not_allowed", "Use GET.", {"Allow": "GET"}).response()
    try:
        # Off the request's own thread: its connection would stay open with the stream.
        task, after, user = await follower.off_request(_authorise_events, request, task_id)
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
    response = EventStreamResponse(sse_stream(task.pk, after), slot)
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


async def sse_stream(task_id, after: int):
    ready = asyncio.Event()
    yield OPENING
    subscription = await follower.subscribe(task_id, after, ready.set)
    try:
        while True:
            ready.clear()  # before taking: what arrives from now on sets it again
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
        subscription.close()
