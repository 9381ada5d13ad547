"""A rate limit per client address on the shared pages, so that link tokens cannot be
tried in bulk and one address cannot flood the pages anyone may open.

Counted by `reports.serving.throttle`, in Django's cache: per process by default, shared
by every web process once `REDIS_URL` puts the cache in Redis. The address is
`REMOTE_ADDR`, which behind the proxy of docs/production.md is the client's (uvicorn takes
it from `X-Forwarded-For` as set by a proxy it trusts); an IPv6 client is counted by its
/64, the block one subscriber usually holds.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings

from reports.serving import throttle


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
    return throttle.wait_s(
        "shared-hits",
        block,
        settings.REPORTS_SHARE_RATE_LIMIT,
        settings.REPORTS_SHARE_RATE_WINDOW_S,
    )
