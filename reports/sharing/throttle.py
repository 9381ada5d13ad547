"""A rate limit per client address on the shared pages, so that link tokens cannot be
tried in bulk and one address cannot flood the pages anyone may open.

Counted in Django's cache as the login throttle counts failures (`reports.login_throttle`):
per process by default, shared by every web process once `REDIS_URL` puts the cache in
Redis. The address is `REMOTE_ADDR`, which behind the proxy of docs/production.md is the
client's (uvicorn takes it from `X-Forwarded-For` as set by a proxy it trusts); an IPv6
client is counted by its /64, the block one subscriber usually holds.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import time

from django.conf import settings
from django.core.cache import cache


def client_block(request) -> str:
    """Return what the client is counted as: its IPv4 address, or its IPv6 /64."""
    address = request.META.get("REMOTE_ADDR", "")
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


def wait_s(block: str) -> int:
    """Count one request of the client `block`; return how long it must wait (0: none).

    A window opens at a client's first request and lasts `REPORTS_SHARE_RATE_WINDOW_S`;
    within it `REPORTS_SHARE_RATE_LIMIT` requests pass. Raises whatever the cache raises
    when it is out of reach.
    """
    digest = hashlib.sha256(block.encode()).hexdigest()
    count_key, since_key = f"shared-hits:{digest}", f"shared-hits-since:{digest}"
    window = settings.REPORTS_SHARE_RATE_WINDOW_S
    cache.add(since_key, time.time(), window)
    cache.add(count_key, 0, window)
    try:
        count = cache.incr(count_key)
    except ValueError:  # expired between add and incr
        cache.set(count_key, 1, window)
        count = 1
    if count <= settings.REPORTS_SHARE_RATE_LIMIT:
        return 0
    since = cache.get(since_key) or time.time()
    return max(1, math.ceil(since + window - time.time()))
