"""`reportworker --health-port`: /healthz and /readyz for an orchestrator, over plain HTTP.

A worker serves no web pages, so this is a few lines of asyncio rather than an ASGI
server. It answers only the status: `/healthz` while the process's event loop runs,
`/readyz` while its loop looks for work successfully (docs/production.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable

REQUEST_TIMEOUT_S = 5.0  # a probe that sends nothing is dropped, not kept


def _response(status: int, body: dict) -> bytes:
    payload = json.dumps(body).encode()
    reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + payload


def answer(path: str, ready: bool) -> bytes:
    """Return the whole HTTP response to a GET of `path`."""
    if path == "/healthz":
        return _response(200, {"status": "ok"})
    if path == "/readyz":
        if ready:
            return _response(200, {"status": "ready"})
        return _response(503, {"status": "unavailable"})
    return _response(404, {"error": {"code": "not_found", "message": "No such probe."}})


async def serve(host: str, port: int, is_ready: Callable[[], bool]) -> asyncio.Server:
    """Start answering probes on host:port; return the server (close it to stop)."""

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
            request_line = await asyncio.wait_for(reader.readline(), REQUEST_TIMEOUT_S)
            parts = request_line.decode("latin-1").split()
            path = parts[1] if len(parts) >= 2 else ""
            writer.write(answer(path.split("?")[0], is_ready()))
            await writer.drain()
        writer.close()

    return await asyncio.start_server(respond, host, port)
