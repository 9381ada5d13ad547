"""The SSE event stream of a task (docs/api.md): replay after the client's seq, then live."""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from reports.auth import ApiError, authenticate, owned_task
from reports.models import TERMINAL, Task
from reports.streaming.follower import Follower

KEEPALIVE_S = 15.0


def resume_point(request: HttpRequest) -> int:
    """Return the seq to resume after; Last-Event-ID wins over ?after=."""
    raw = request.headers.get("Last-Event-ID")
    if raw is None:
        raw = request.GET.get("after", "0")
    if not raw.isdigit() or not raw.isascii():
        raise ApiError(400, "invalid_request", "The resume point must be a non-negative integer.")
    return int(raw)


def _authorise_events(request: HttpRequest, task_id) -> tuple[Task, int]:
    user = authenticate(request)
    return owned_task(user, task_id), resume_point(request)


async def events(request: HttpRequest, task_id) -> HttpResponse:
    if request.method != "GET":
        return ApiError(405, "method_not_allowed", "Use GET.", {"Allow": "GET"}).response()
    try:
        task, after = await sync_to_async(_authorise_events)(request, task_id)
    except ApiError as exc:
        return exc.response()
    if task.status in TERMINAL and after >= task.last_seq:
        # Nothing will ever follow: 204 is what makes an EventSource stop reconnecting
        # (docs/api.md), where an empty 200 stream would have it reconnect forever.
        return HttpResponse(status=204)
    response = StreamingHttpResponse(
        sse_stream(task.pk, after), content_type="text/event-stream; charset=utf-8"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def sse_stream(task_id, after: int):
    idle = 0.0
    async with Follower(task_id, after) as follower:
        async for event in follower.events():
            if event is None:
                idle += follower.idle_s
                if idle >= KEEPALIVE_S:
                    idle = 0.0
                    yield b": ping\n\n"
                continue
            idle = 0.0
            data = json.dumps(event.data, ensure_ascii=False, separators=(",", ":"))
            yield f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n".encode()
