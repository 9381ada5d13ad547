"""Private files: uploaded documents under random names, and saved reports, written atomically."""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from pathlib import Path

from django.conf import settings


def _dir(kind: str) -> Path:
    path = Path(settings.REPORTS_STORAGE_DIR) / kind
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


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


def save_upload(data: bytes) -> str:
    """Store an uploaded document; return its storage name (never the user's file name)."""
    name = secrets.token_hex(16)
    write_atomically(_dir("uploads") / name, data)
    return name


def read_upload(storage_name: str) -> bytes:
    return (_dir("uploads") / storage_name).read_bytes()


def delete_uploads(storage_names) -> None:
    for name in storage_names:
        (_dir("uploads") / name).unlink(missing_ok=True)


def result_path(result_id) -> Path:
    return _dir("results") / f"{result_id}.md"


def save_result(result_id, text: str) -> tuple[str, int]:
    """Save a report; return its sha256 and size in bytes."""
    data = text.encode("utf-8")
    write_atomically(result_path(result_id), data)
    return hashlib.sha256(data).hexdigest(), len(data)
