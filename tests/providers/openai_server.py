"""An OpenAI-compatible chat completions server over real sockets, with faults on demand.

It runs its own event loop in a thread, so sync tests, async tests and other processes
can all talk to it. Queue `Reply`s: each request takes the next one (a normal stream
when none is left). It records every request and notices when a client closes its
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import threading
from collections import deque
from dataclasses import dataclass, field, replace
from http import HTTPStatus

REPORT_PIECES = (
    "# A report\n\n",
    "## Summary\n\n",
    "The documents say one thing clearly.\n\n",
    "## Details\n\n",
    "More text.\n",
)
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 64},
}


@dataclass
class Reply:
    """What the server does with one request.

    `end` says how a 200 stream ends: `done` (`data: [DONE]`, then a clean end), `eof`
    (a clean end without `[DONE]`), `drop` (the connection closes mid-body), `hang`
    (nothing more is sent; the connection stays open), `garbage` (an event that is not
    JSON, then a clean end), `error_event` (an error object, `error` when given, as an
    event, then a clean end, as vLLM and llama-cpp-python do when generation fails).
    `silent` sends no response at all, not even headers. `cite` answers, instead of `text`,
    one bullet per passage id the request's messages name (`S12`), in order, each citing it.
    """

    status: int = 200
    error: dict | None = None
    headers: dict[str, str] = field(default_factory=dict)
    text: tuple[str, ...] = REPORT_PIECES
    finish_reason: str | None = "stop"
    usage: dict | None = field(default_factory=lambda: dict(USAGE))
    end: str = "done"
    cite: bool = False
    hold: threading.Event | None = None  # the stream's text waits for this to be set


_PASSAGE_ID = re.compile(r"\bS[1-9]\d*\b")


def citing(body: dict) -> tuple[str, ...]:
    """Return a reply's text that cites every passage the request shows, once each."""
    said = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    ids = dict.fromkeys(_PASSAGE_ID.findall(said))
    return tuple(f"- What {i} says, in short. [{i}]\n" for i in ids)


def answer(body: dict) -> Reply:
    """Answer as a model would: notes citing every passage of a part, combined notes
    that keep their citations, a report from notes citing what they cite, or else the
    standard report."""
    system, user = (m.get("content", "") for m in body.get("messages", [{}, {}])[:2])
    if system.startswith("You are Reportline's reader"):
        ids = re.findall(r"^\[(S\d+)\] \(", user, re.MULTILINE)
        return Reply(text=tuple(f"- Passage {sid} says something. [{sid}]\n" for sid in ids))
    if system.startswith("You are Reportline's editor"):
        # Shorter than the notes it combines, as its output cap requires: one note that
        # keeps every citation.
        ids = dict.fromkeys(re.findall(r"^- .*\[(S\d+)\]$", user, re.MULTILINE))
        return Reply(text=(f"- The notes say something. {' '.join(f'[{i}]' for i in ids)}\n",))
    cited = sorted(set(re.findall(r"\[(S\d+)\]", user)), key=lambda sid: int(sid[1:]))
    if "<notes-" in user:
        sources = "".join(f"- {sid} is cited. [{sid}]\n" for sid in cited)
        return Reply(text=(*REPORT_PIECES, "\n## Sources read\n\n", sources))
    return Reply()


def error(status: int, message: str, *, code: str | None = None, **headers) -> Reply:
    """Return a non-200 reply with an OpenAI-style error body."""
    body = {"message": message, "type": code or "error", "param": None, "code": code}
    return Reply(status=status, error=body, headers=headers)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: dict


class OpenAIServer:
    def __init__(self, tls: ssl.SSLContext | None = None, tokenize_path: str = "") -> None:
        self.tls = tls  # serve https with this context
        # Where it counts tokens as a byte-level vocabulary would (one a byte), as
        # llama-cpp-python's server does at /extras/tokenize; other paths answer 404.
        self.tokenize_path = tokenize_path
        self.counted: list[str] = []  # the texts it was asked to count
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self.streaming = threading.Event()  # a 200 stream has sent its text
        self.client_closed = threading.Event()  # a client closed a connection we held open
        self.hanging = threading.Event()  # a `hang` reply has sent what it sends
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._count = 0
        self.faults: dict[int, Reply] = {}  # the n-th request (from 1) gets this reply
        # Chat completions under way now, and the most there ever were at once.
        self.open_calls = self.most_open_calls = 0
        self.calls_changed = threading.Condition()

    def start(self) -> OpenAIServer:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls), self._loop
        ).result(5)
        return self

    def stop(self) -> None:
        async def close():
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 2)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    @property
    def port(self) -> int:
        return self._server.sockets[0].getsockname()[1]

    @property
    def base_url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}/v1"

    def queue(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    # --- the server side --------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        counted = False
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *lines = head.decode("latin-1").split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            headers = {}
            for line in lines:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            raw = await reader.readexactly(int(headers.get("content-length", "0")))
            if not path.endswith("/chat/completions"):
                await self._answer_other(writer, path, json.loads(raw or b"{}"))
                return
            self._count += 1
            counted = self._opened(1)
            self.requests.append(Received(method, path, headers, json.loads(raw or b"{}")))
            reply = self.faults.pop(self._count, None) or (
                self.replies.popleft() if self.replies else answer(self.requests[-1].body)
            )
            if reply.cite:
                reply = replace(reply, text=citing(self.requests[-1].body))
            if reply.end == "silent":
                await self._wait_for_close(reader)
            elif reply.status != 200:
                await self._send_error(writer, reply)
            else:
                await self._send_stream(reader, writer, reply)
        except ConnectionError:  # the client hung up while the reply was being sent
            self.client_closed.set()
        except asyncio.IncompleteReadError:
            pass
        finally:
            if counted:
                self._opened(-1)
            writer.close()

    def _opened(self, change: int) -> bool:
        with self.calls_changed:
            self.open_calls += change
            self.most_open_calls = max(self.most_open_calls, self.open_calls)
            self.calls_changed.notify_all()
        return True

    def wait_for_open_calls(self, count: int, timeout: float = 30) -> bool:
        """Wait until at least `count` chat completions are under way at once; False on
        timeout."""
        with self.calls_changed:
            return self.calls_changed.wait_for(lambda: self.open_calls >= count, timeout)

    async def _answer_other(self, writer: asyncio.StreamWriter, path: str, body: dict) -> None:
        if self.tokenize_path and path == self.tokenize_path:
            self.counted.append(body["input"])
            status, answer = 200, {"tokens": list(body["input"].encode())}
        else:
            status, answer = 404, {"detail": "Not Found"}
        data = json.dumps(answer).encode()
        head = self._head(status, {"content-type": "application/json"})
        writer.write(head + f"content-length: {len(data)}\r\n\r\n".encode() + data)
        await writer.drain()

    async def _wait_for_close(self, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(1024):
                pass
        self.client_closed.set()

    async def _send_error(self, writer: asyncio.StreamWriter, reply: Reply) -> None:
        body = json.dumps({"error": reply.error}).encode()
        headers = {
            "content-type": "application/json",
            "x-request-id": f"req_{self._count}",
            **reply.headers,
        }
        writer.write(
            self._head(reply.status, headers)
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()

    async def _send_stream(self, reader, writer, reply: Reply) -> None:
        chunk_id = f"chatcmpl-{self._count}"
        headers = {
            "content-type": "text/event-stream",
            "transfer-encoding": "chunked",
            "x-request-id": f"req_{self._count}",
            **reply.headers,
        }
        writer.write(self._head(200, headers) + b"\r\n")
        await writer.drain()

        def chunk(delta: dict, finish_reason=None, usage=None, choices=True) -> dict:
            body = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": "test-model",
                "choices": (
                    [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
                    if choices
                    else []
                ),
            }
            if usage is not None:
                body["usage"] = usage
            return body

        if reply.hold is not None:
            await asyncio.to_thread(reply.hold.wait)
        events = []
        if reply.text:
            events.append(chunk({"role": "assistant", "content": ""}))
            events.extend(chunk({"content": piece}) for piece in reply.text)
        if reply.finish_reason is not None:
            events.append(chunk({}, reply.finish_reason))
        if reply.usage is not None and reply.end != "drop":
            events.append(chunk({}, usage=reply.usage, choices=False))
        for event in events:
            await self._send_chunk(writer, f"data: {json.dumps(event)}\n\n")
        self.streaming.set()
        if reply.end == "garbage":
            await self._send_chunk(writer, 'data: {"id": "chatcmpl-broken", "choi\n\n')
        if reply.end == "done":
            await self._send_chunk(writer, "data: [DONE]\n\n")
        if reply.end == "error_event":
            failure = {
                "error": reply.error or {"message": "generation failed", "type": "server_error"}
            }
            await self._send_chunk(writer, f"data: {json.dumps(failure)}\n\n")
        if reply.end in ("done", "eof", "garbage", "error_event"):
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        elif reply.end == "hang":
            self.hanging.set()
            await self._wait_for_close(reader)
        # "drop": return without the last chunk; closing the connection cuts the body.

    async def _send_chunk(self, writer: asyncio.StreamWriter, text: str) -> None:
        data = text.encode()
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()

    @staticmethod
    def _head(status: int, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "connection: close"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        return ("\r\n".join(lines) + "\r\n").encode()


KEY = "sk-test-9f8e7d6c5b4a-secret"


def point_at(settings, base_url: str, **options) -> None:
    settings.REPORTS_PROVIDER = "openai"
    settings.REPORTS_MODEL = "test-model"
    settings.REPORTS_PRICES = {
        **settings.REPORTS_PRICES,
        "test-model": {"input": 1_000_000, "output": 4_000_000, "cached_input": 500_000},
    }
    settings.REPORTS_PROVIDERS = {
        **settings.REPORTS_PROVIDERS,
        "openai": {
            "BACKEND": "reports.providers.openai.OpenAIProvider",
            "OPTIONS": {"base_url": base_url, "api_key": KEY, **options},
        },
    }


@contextlib.contextmanager
def local_provider_on_it(settings, model: str):
    """Yield (server, provider): a `local` provider whose model server is a scripted
    OpenAIServer (no model is loaded), its model `model`."""
    from reports.providers.local import LocalProvider, Props

    settings.REPORTS_MODEL = model
    server = OpenAIServer().start()
    provider = LocalProvider(model_path="unused.gguf")
    provider.attach(server.base_url.removesuffix("/v1"), Props(window=4096, slots=1))
    provider.server.ready.set()
    try:
        yield server, provider
    finally:
        server.stop()
