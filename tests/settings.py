"""Settings for the test suite: production settings with a throwaway secret key."""

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key-not-for-deployment")

from project.settings import *  # noqa: F403

# Fast hashing: the tests create users by the dozen; production keeps Django's default.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
