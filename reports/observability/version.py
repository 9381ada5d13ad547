"""The running application's version: `APP_VERSION` when set, else the package's own
version with the git commit it was started from, when there is one."""

from __future__ import annotations

import functools
import subprocess
from importlib.metadata import PackageNotFoundError, version

from django.conf import settings


def app_version() -> str:
    """Return e.g. '0.1.0+g1a2b3c4'; `settings.APP_VERSION` wins when set."""
    return settings.APP_VERSION or _built_version()


@functools.cache
def _built_version() -> str:
    try:
        number = version("reportline")
    except PackageNotFoundError:
        number = "unknown"
    commit = _git_commit()
    return f"{number}+g{commit}" if commit else number


def _git_commit() -> str:
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=settings.BASE_DIR,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return ""  # not a checkout, or no git: the package version alone
    return found.stdout.strip()
