"""How often someone did a thing lately, counted in Django's cache: the one count of
requests in a window, for limits whose refused requests leave no row to count (the shared
pages' requests per client address, webhook registrations per user).

Per process by default, shared by every web process once `REDIS_URL` puts the cache in
Redis, as the login throttle's count of failures (`reports.login_throttle`). A window opens
at the first request counted and lasts its length; within it `limit` requests pass.
"""

from __future__ import annotations

import hashlib
import math
import time

from django.core.cache import cache

# The error code of a request refused because its count is out of reach (503): the login's
# throttle and every limit counted here refuse rather than let a request through uncounted.
UNAVAILABLE = "throttle_unavailable"


def wait_s(kind: str, who: str, limit: int, window_s: int) -> int:
    """Count one request of `who` at `kind`; return how long it must wait (0: none).

    Raises whatever the cache raises when it is out of reach: a caller refuses the request
    then, never lets it through uncounted."""
    digest = hashlib.sha256(who.encode()).hexdigest()
    count_key, since_key = f"{kind}:{digest}", f"{kind}-since:{digest}"
    cache.add(since_key, time.time(), window_s)
    cache.add(count_key, 0, window_s)
    try:
        count = cache.incr(count_key)
    except ValueError:  # expired between add and incr
        cache.set(count_key, 1, window_s)
        count = 1
    if count <= limit:
        return 0
    since = cache.get(since_key) or time.time()
    return max(1, math.ceil(since + window_s - time.time()))
