"""Settings for the test suite: production settings with a throwaway secret key."""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key-not-for-deployment")
# The test client speaks plain HTTP; tests/security/test_deploy.py checks the HTTPS defaults.
os.environ.setdefault("DJANGO_HTTPS", "0")
# The concurrency tests hold a connection in each of a few dozen threads at once, more
# than a server process's pool (8 by default) lends.
os.environ.setdefault("REPORTS_DB_POOL_SIZE", "40")

from project.settings import *  # noqa: F403
from project.settings import DATABASES

# A file, not memory, so the worker's threads share it as in production; one per test
# process, so runs side by side do not meet.
if DATABASES["default"]["ENGINE"] == "project.sqlite":
    DATABASES["default"]["TEST"] = {
        "NAME": str(Path(tempfile.gettempdir()) / f"reportline-test-{os.getpid()}.sqlite3")
    }

# Fast hashing: the tests create users by the dozen; production keeps Django's default.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Tests create tasks by the dozen in a second; tests/security sets the per-user limit low.
REPORTS_USER_RATE_LIMIT = 10_000
