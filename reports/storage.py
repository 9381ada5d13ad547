"""Private files: uploaded documents under random names, and saved reports.

Every file goes through Django's storage API, the `reports` entry of `STORAGES`: local files
under `REPORTS_STORAGE_DIR` by default, or an S3-compatible object store
(`REPORTS_STORAGE=s3`, reports/object_store.py), so web and worker processes need share no
disk. Either way a reader sees a file whole or not at all, and every failure of the store
is an `OSError`.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from pathlib import Path

from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, storages


class AtomicFileSystemStorage(FileSystemStorage):
    """Local files written aside and renamed into place, so no reader sees half of one."""

    def _save(self, name: str, content) -> str:
        path = Path(self.path(name))
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        content.seek(0)
        write_atomically(path, content.read())
        return name


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that a reader sees all of it or nothing."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _store():
    return storages["reports"]


def save_upload(data: bytes) -> str:
    """Store an uploaded document; return its storage name (never the user's file name)."""
    name = secrets.token_hex(16)
    _store().save(f"uploads/{name}", ContentFile(data))
    return name


def read_upload(storage_name: str) -> bytes:
    with _store().open(f"uploads/{storage_name}", "rb") as f:
        return f.read()


def delete_uploads(storage_names) -> None:
    for name in storage_names:
        _store().delete(f"uploads/{name}")


def _result_name(result_id) -> str:
    return f"results/{result_id}.md"


def save_result(result_id, text: str) -> tuple[str, int]:
    """Save a report; return its sha256 and size in bytes."""
    data = text.encode("utf-8")
    _store().save(_result_name(result_id), ContentFile(data))
    return hashlib.sha256(data).hexdigest(), len(data)


def open_result(result_id) -> File:
    """Open a saved report for reading; FileNotFoundError when it is not in the store."""
    name = _result_name(result_id)
    if not _store().exists(name):
        raise FileNotFoundError(name)
    return _store().open(name, "rb")


def read_result(result_id) -> bytes:
    """Return a saved report's bytes (at most REPORTS_MAX_REPORT_KB); FileNotFoundError
    when it is not in the store."""
    with open_result(result_id) as saved:
        return saved.read()


def delete_result(result_id) -> None:
    _store().delete(_result_name(result_id))
