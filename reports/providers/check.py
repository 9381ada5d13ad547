"""Where the time goes between this machine and the model: `manage.py check_provider`.

Each stage is measured on its own: DNS lookup, TCP connect and TLS handshake on a fresh
socket, then time to first byte (the response headers) and to first token (the first
text) of a real, small streaming request through the configured provider. A stage over
its threshold is called slow.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from reports.providers.base import (
    Completed,
    GenerationRequest,
    Heartbeat,
    Provider,
    ProviderError,
    SourceDocument,
    TextDelta,
)

# Above these a stage is slow (milliseconds). Connection set-up should take a few round
# trips; the model's first token includes reading the prompt, so it gets the most room.
THRESHOLDS_MS = {
    "dns": 200.0,
    "tcp": 300.0,
    "tls": 500.0,
    "first_byte": 3000.0,
    "first_token": 10000.0,
}
LABELS = {
    "dns": "DNS lookup",
    "tcp": "TCP connect",
    "tls": "TLS handshake",
    "first_byte": "time to first byte",
    "first_token": "time to first token",
}
ADVICE = {
    "dns": "the resolver is slow: check /etc/resolv.conf or use a closer resolver",
    "tcp": "the network path to the server is slow or far away",
    "tls": "the TLS handshake is slow: a far server, or a proxy inspecting TLS",
    "first_byte": "the server is slow to accept the request: queueing or overload on its side",
    "first_token": "the model is slow to start writing: a large prompt, a busy server, or a "
    "local model still loading (the first request after a start loads it)",
}
CHECK_REQUEST = GenerationRequest(
    task_id="check-provider",
    attempt_number=1,
    documents=(SourceDocument("check.txt", "Reportline checks its connection to the model."),),
    max_output_tokens=16,
)


class CheckFailed(Exception):
    """A stage failed; the message says which and why."""


@dataclass
class Stage:
    key: str
    ms: float

    @property
    def label(self) -> str:
        return LABELS[self.key]

    @property
    def threshold_ms(self) -> float:
        return THRESHOLDS_MS[self.key]

    @property
    def slow(self) -> bool:
        return self.ms > self.threshold_ms


def _timed(key: str, action: Callable[[], object]) -> tuple[Stage, object]:
    start = time.monotonic()
    try:
        result = action()
    except (OSError, ssl.SSLError) as exc:
        raise CheckFailed(f"{LABELS[key]} failed: {exc}") from None
    return Stage(key, (time.monotonic() - start) * 1000), result


def measure_connection(
    base_url: str, *, timeout_s: float = 10.0, ssl_context: ssl.SSLContext | None = None
) -> list[Stage]:
    """Return DNS, TCP and (for https) TLS timings to the server of `base_url`."""
    url = urlsplit(base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise CheckFailed(f"OPENAI_BASE_URL must be an http(s) URL, not {base_url!r}.")
    port = url.port or (443 if url.scheme == "https" else 80)
    dns, addresses = _timed(
        "dns", lambda: socket.getaddrinfo(url.hostname, port, type=socket.SOCK_STREAM)
    )
    family, kind, proto, _, address = addresses[0]

    def connect() -> socket.socket:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout_s)
        try:
            sock.connect(address)
        except OSError:
            sock.close()
            raise
        return sock

    tcp, sock = _timed("tcp", connect)
    stages = [dns, tcp]
    with contextlib.closing(sock):
        if url.scheme == "https":
            context = ssl_context or ssl.create_default_context()
            tls, tls_sock = _timed(
                "tls", lambda: context.wrap_socket(sock, server_hostname=url.hostname)
            )
            tls_sock.close()
            stages.append(tls)
    return stages


async def measure_request(provider: Provider) -> list[Stage]:
    """Return the time to first byte and to first token of a small streaming request."""
    start = time.monotonic()
    stages: list[Stage] = []
    try:
        async with contextlib.aclosing(provider.stream(CHECK_REQUEST)) as items:
            async for item in items:
                elapsed = (time.monotonic() - start) * 1000
                if isinstance(item, Heartbeat) and not stages:
                    stages.append(Stage("first_byte", elapsed))
                elif isinstance(item, TextDelta) and item.text:
                    if not stages:
                        stages.append(Stage("first_byte", elapsed))
                    stages.append(Stage("first_token", elapsed))
                    return stages  # closing the stream stops the rest
                elif isinstance(item, Completed):
                    break
    except ProviderError as exc:
        raise CheckFailed(f"The request failed ({exc.error_type or 'unknown'}): {exc}") from None
    raise CheckFailed("The provider answered but sent no text.")


def verdict(stages: list[Stage]) -> str:
    """Return one line saying which stage is slow, and what that usually means."""
    slow = [s for s in stages if s.slow]
    if not slow:
        worst = max(stages, key=lambda s: s.ms / s.threshold_ms)
        return f"Nothing is slow; the largest share of its allowance is {worst.label}."
    return " ".join(
        f"Slow: {s.label} ({s.ms:.0f} ms, over {s.threshold_ms:.0f} ms): {ADVICE[s.key]}."
        for s in slow
    )
