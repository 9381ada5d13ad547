"""Liveness and readiness for load balancers and orchestrators (docs/production.md).

`/healthz` answers while the process serves at all. `/readyz` says whether it should be
sent work: the database answers and the process is not stopping. A channel layer that does
not answer makes it `degraded`, still 200: pages then catch up by polling the database.
It also names the provider's circuit (docs/providers.md) when it is not closed: tasks then
wait in the queue, but the web tier still takes them, so it stays ready (200).
Both are unauthenticated, so they say nothing but which check failed: no host, no error
text, no version. A probe costs one `SELECT 1` and one message to the process's own
channel, and probes arriving together share one check (at most one a second), so a flood
of probes cannot crowd out real queries.
"""

from __future__ import annotations

import asyncio
import logging
import time

from channels.layers import get_channel_layer
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from reports.models import CircuitState, ProviderCircuit
from reports.models.breaker import provider_name
from reports.observability.logs import log_event
from reports.serving.stopping import is_stopping
from reports.threads import on_shared_db

CHECK_TIMEOUT_S = 2.0  # a dependency slower than this is as good as down to a balancer
FRESH_S = 1.0  # how long one check's answer serves later probes

log = logging.getLogger(__name__)
_last: tuple[float, tuple[dict[str, bool], dict[str, str]]] | None = None
_running: asyncio.Future | None = None


def _select_one() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


async def _database() -> None:
    await on_shared_db(_select_one)()


async def _channel_layer() -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel("health")
    try:
        await layer.send(channel, {"type": "health.ping"})
        await layer.receive(channel)
    finally:
        await _let_go(layer, channel)


async def _let_go(layer, channel: str) -> None:
    """Make the layer forget `channel`: a receive on it that is cancelled while it waits is
    the layer API's way (Redis publish/subscribe unsubscribes the channel then)."""
    waiting = asyncio.ensure_future(layer.receive(channel))
    await asyncio.sleep(0)  # the receive is waiting now
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)


async def _passes(name: str, check) -> bool:
    try:
        await asyncio.wait_for(check(), CHECK_TIMEOUT_S)
    except TimeoutError:
        _failed(name, f"no answer within {CHECK_TIMEOUT_S:g} s")
        return False
    except Exception as exc:  # whatever failed, the balancer only needs to know that it did
        _failed(name, f"{type(exc).__name__}: {exc}")
        return False
    return True


def _failed(name: str, error: str) -> None:
    """Say in the process's own log why a check failed, which the answer never says: the
    operator reads there which host refused or which setting is wrong."""
    log_event(log, "readiness.check_failed", logging.WARNING, check=name, error=error)


def _circuit() -> dict[str, str]:
    circuit = ProviderCircuit.objects.current()
    state = CircuitState.CLOSED if circuit is None else circuit.state
    found = {"name": provider_name(), "circuit": state}
    if circuit is not None and circuit.next_try_at is not None:
        found["next_try_at"] = circuit.next_try_at.isoformat()
    return found


async def _provider() -> dict[str, str]:
    """Return the provider's name and its circuit's state; `unknown` without a database."""
    try:
        return await asyncio.wait_for(on_shared_db(_circuit)(), CHECK_TIMEOUT_S)
    except Exception:
        return {"name": provider_name(), "circuit": "unknown"}


async def _check() -> tuple[dict[str, bool], dict[str, str]]:
    database, channel_layer, provider = await asyncio.gather(
        _passes("database", _database), _passes("channel_layer", _channel_layer), _provider()
    )
    return {"database": database, "channel_layer": channel_layer}, provider


async def checked() -> tuple[dict[str, bool], dict[str, str]]:
    """Return whether each dependency answers, and the provider's circuit, checking at
    most once a second."""
    global _last, _running
    if _last is not None and time.monotonic() - _last[0] < FRESH_S:
        return _last[1]
    if _running is None or _running.done():
        _running = asyncio.ensure_future(_check())
    checks = await asyncio.shield(_running)
    _last = (time.monotonic(), checks)
    return checks


@require_GET
async def healthz(request) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
async def readyz(request) -> JsonResponse:
    checks, provider = await checked()
    stopping = is_stopping()
    # The channel layer only wakes pages: without it they poll the database, so the
    # process still serves. Every web process shares it, so a 503 for it would take them
    # all out of the balancer at once, for a fault their pages ride out.
    ready = checks["database"] and not stopping
    body = {
        "status": ("ready" if all(checks.values()) else "degraded") if ready else "unavailable",
        "checks": {name: "ok" if ok else "down" for name, ok in checks.items()},
        "draining": stopping,  # the answer's own word (docs/production.md)
        "provider": provider,  # its circuit: tasks wait while it is open; still ready
    }
    return JsonResponse(body, status=200 if ready else 503)
