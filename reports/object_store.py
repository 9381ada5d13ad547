"""The S3-compatible object store behind `REPORTS_STORAGE=s3` (django-storages' S3 backend).

An object appears whole when its upload completes, never half-written, so saves need no
rename. What this adds: every failure of the store (unreachable, refused, missing object)
reaches the caller as an `OSError`, the one error type reports/storage.py promises, and a
file is fetched when it is opened, so a failure shows up there and not mid-response.
"""

from __future__ import annotations

import functools

from botocore.exceptions import BotoCoreError, ClientError
from storages.backends.s3 import S3Storage


def _as_os_error(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 404:
                raise FileNotFoundError(str(exc)) from exc
            raise OSError(f"object store: {exc}") from exc
        except BotoCoreError as exc:
            raise OSError(f"object store: {exc}") from exc

    return wrapper


class ObjectStorage(S3Storage):
    """django-storages' S3Storage whose failures are `OSError`s."""

    def _open(self, name, mode="rb"):
        f = super()._open(name, mode)
        if "r" in mode:
            f.file  # noqa: B018 -- fetch now, inside the error translation
        return f

    _open = _as_os_error(_open)
    _save = _as_os_error(S3Storage._save)
    delete = _as_os_error(S3Storage.delete)
    exists = _as_os_error(S3Storage.exists)
