"""Settings for the test suite: production settings with a throwaway secret key."""

import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key-not-for-deployment")
# The test client speaks plain HTTP; tests/security/test_deploy.py checks the HTTPS defaults.
os.environ.setdefault("DJANGO_HTTPS", "0")
# The concurrency tests hold a connection in each of a few dozen threads at once, more
# than a server process's pool (8 by default) lends.
os.environ.setdefault("REPORTS_DB_POOL_SIZE", "40")


def own_redis_database(url: str) -> str:
    """Side by side (pytest-xdist), each test process counts in a Redis database of its own,
    as the tests clear the cache they count in: gw0 the one `url` names, gw1 the next. (The
    channel layer's publish/subscribe ignores the database; its channels are per task.)"""
    parts = urlsplit(url)
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    database = int(parts.path.strip("/") or 0) + worker
    return urlunsplit(parts._replace(path=f"/{database}"))


if os.environ.get("REDIS_URL"):
    os.environ["REDIS_URL"] = own_redis_database(os.environ["REDIS_URL"])
# Where the login throttle's tests count in Redis when the run names no Redis of its own.
TEST_REDIS_URL = os.environ.get("REDIS_URL") or own_redis_database("redis://127.0.0.1:6379/4")

from project.settings import *  # noqa: E402, F403
from project.settings import DATABASES  # noqa: E402

# A file, not memory, so the worker's threads share it as in production; one per test
# process, so runs side by side do not meet.
if DATABASES["default"]["ENGINE"] == "project.sqlite":
    DATABASES["default"]["TEST"] = {
        "NAME": str(Path(tempfile.gettempdir()) / f"reportline-test-{os.getpid()}.sqlite3")
    }

# Fast hashing: the tests create users by the dozen; production keeps Django's default.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Tests create tasks by the dozen in a second; tests/security sets the per-user limits low.
REPORTS_USER_RATE_LIMIT = 10_000
REPORTS_USER_QUEUE_LIMIT = 10_000
