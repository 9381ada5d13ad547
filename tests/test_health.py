"""/healthz and /readyz: cheap, unauthenticated, and saying nothing but which check failed."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta

import pytest
from channels.layers import get_channel_layer
from django.db import OperationalError
from django.test import AsyncClient
from django.utils import timezone

from reports import health
from reports.models import CircuitState, ProviderCircuit
from reports.serving import stopping

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_checks(monkeypatch):
    monkeypatch.setattr(health, "_last", None)
    monkeypatch.setattr(health, "_running", None)
    monkeypatch.setattr(stopping, "_stopping", False)


async def get(path: str):
    reply = await AsyncClient().get(path)
    return reply.status_code, json.loads(reply.content)


async def test_a_healthy_process_is_alive_and_ready_without_credentials():
    assert await get("/healthz") == (200, {"status": "ok"})
    assert await get("/readyz") == (
        200,
        {
            "status": "ready",
            "checks": {"database": "ok", "channel_layer": "ok"},
            "draining": False,
            "provider": {"name": "simulated", "circuit": "closed"},
        },
    )


async def test_readiness_checks_of_a_redis_layer_leave_nothing_subscribed(private_redis):
    # A balancer asks every few seconds for weeks: each check's channel must go.
    for _ in range(3):
        health._last = None
        status, body = await get("/readyz")
        assert (status, body["checks"]["channel_layer"]) == (200, "ok")
    assert await asyncio.to_thread(private_redis.subscriptions) == []


async def test_with_the_database_down_it_is_alive_but_not_ready(monkeypatch):
    def refused():
        raise OperationalError('connection to server at "10.0.0.7", port 5432 failed')

    monkeypatch.setattr(health, "_select_one", refused)
    status, body = await get("/readyz")
    assert status == 503
    assert body["checks"] == {"database": "down", "channel_layer": "ok"}
    assert "10.0.0.7" not in json.dumps(body)  # nothing about the infrastructure leaks
    assert await get("/healthz") == (200, {"status": "ok"})


async def test_the_process_log_says_why_a_check_failed(monkeypatch, caplog):
    # The answer names only the check; the operator finds the cause in the process's log.
    async def refused(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to redis.internal:6379")

    monkeypatch.setattr(get_channel_layer(), "send", refused)
    with caplog.at_level(logging.WARNING, logger="reports.health"):
        assert (await get("/readyz"))[1]["status"] == "degraded"
    [line] = [r for r in caplog.records if r.getMessage() == "readiness.check_failed"]
    assert line.event_fields["check"] == "channel_layer"
    assert line.event_fields["error"] == (
        "ConnectionError: Error 111 connecting to redis.internal:6379"
    )


async def test_with_the_channel_layer_down_it_stays_ready_but_degraded(monkeypatch):
    """Pages poll the database while the channel layer is down: every web process shares
    that layer, and a 503 would take them all out of the balancer at once."""

    async def refused(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to redis.internal:6379")

    monkeypatch.setattr(get_channel_layer(), "send", refused)
    status, body = await get("/readyz")
    assert (status, body["status"]) == (200, "degraded")
    assert body["checks"] == {"database": "ok", "channel_layer": "down"}
    assert "redis.internal" not in json.dumps(body)


async def test_a_dependency_that_hangs_is_down_after_a_bounded_wait(monkeypatch):
    monkeypatch.setattr(health, "CHECK_TIMEOUT_S", 0.05)

    async def hangs(*args, **kwargs):
        await asyncio.Event().wait()

    monkeypatch.setattr(get_channel_layer(), "receive", hangs)
    status, body = await get("/readyz")
    assert (status, body["status"], body["checks"]["channel_layer"]) == (200, "degraded", "down")


async def test_a_stopping_process_is_alive_but_not_ready(monkeypatch):
    monkeypatch.setattr(stopping, "_stopping", True)
    status, body = await get("/readyz")
    assert (status, body["status"], body["draining"]) == (503, "unavailable", True)
    assert await get("/healthz") == (200, {"status": "ok"})


async def test_a_burst_of_probes_costs_one_check(monkeypatch):
    queries = []

    def counted():
        queries.append(1)

    monkeypatch.setattr(health, "_select_one", counted)
    await asyncio.gather(*(get("/readyz") for _ in range(20)))
    assert len(queries) == 1


async def test_an_open_circuit_is_named_and_the_web_tier_stays_ready():
    retry_at = timezone.now() + timedelta(seconds=30)
    await ProviderCircuit.objects.acreate(
        provider="simulated", state=CircuitState.OPEN, failures=5, trips=1, retry_at=retry_at
    )
    status, body = await get("/readyz")
    assert (status, body["status"]) == (200, "ready")
    assert body["provider"] == {
        "name": "simulated",
        "circuit": "open",
        "next_try_at": retry_at.isoformat(),
    }
