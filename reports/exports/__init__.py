"""The saved report in other formats: a standalone HTML page, PDF and Word (docs/api.md).

Markdown is what is saved and validated; the other formats are made from it when first
asked for and kept beside it in the report store, keyed by the report's sha256, so a
second download converts nothing. The HTML page is the page's own rendering
(reports.rendering) set in a page of its own, the PDF that page laid out, the Word document
built from the Markdown's tokens. Each is made in a child process under CPU, memory and
wall-clock limits (the parsers' sandbox), a few at a time and one at a time for each user,
so a conversion neither holds the interpreter the event loop needs nor outlives its limit,
and one user's burst of downloads leaves the other slots to others.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from reports import storage
from reports.exports import cache, passages
from reports.parsers import sandbox
from reports.parsers.base import ParseError

# A report is at most REPORTS_MAX_REPORT_KB (200 KB by default). Its PDF, the slowest,
# took 8.5 s of CPU and 240 MB (docs/benchmarks.md, "Download formats"): these leave it
# room on a busy machine, and the wall clock ends before the proxy's 60 s read timeout, so
# the user reads why rather than a gateway error.
LIMITS = sandbox.Limits(cpu_s=30, memory_mb=1024, wall_s=55)
AT_ONCE = 2  # conversions running at once in a process; more wait for a free one
WAIT_FOR_SLOT_S = 10.0
RETRY_AFTER_S = 10
_slots = threading.BoundedSemaphore(AT_ONCE)
# The owners whose report is being converted in this process: one at a time each, so one
# user asking for many conversions at once holds one slot, never every one.
_owners: set = set()
_owners_changed = threading.Condition()


@dataclass(frozen=True)
class Format:
    extension: str
    content_type: str
    child: str | None  # the entry converting the Markdown in the sandbox's child


FORMATS = {
    "md": Format("md", "text/markdown; charset=utf-8", None),
    "html": Format("html", "text/html; charset=utf-8", "reports.exports.html.in_child"),
    "pdf": Format("pdf", "application/pdf", "reports.exports.pdf.in_child"),
    "docx": Format(
        "docx",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "reports.exports.docx.in_child",
    ),
}


class ConversionFailed(Exception):
    """The report could not be converted: `status` and `message` are the answer's, `detail`
    what went wrong, for the log."""

    def __init__(
        self, status: int, message: str, detail: str = "", retry_after_s: int | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail or message
        self.retry_after_s = retry_after_s


def exported(task, name: str, *, with_passages: bool = False) -> bytes:
    """Return the task's saved report in format `name`, converting it once; with the
    passages it cites quoted at its end when `with_passages` (reports.exports.passages).

    Raise OSError when the report store fails, ConversionFailed when the conversion does.
    """
    if with_passages:
        markdown = storage.read_result(task.result_id).decode("utf-8")
        numbers = passages.cited(markdown)
        quoted = passages.appended(markdown, task.passages.filter(number__in=numbers))
        if name == "md":
            return quoted.encode("utf-8")
        # Kept by the sha256 of that Markdown (the report's and its passages' texts), as
        # the report alone is kept by its own.
        key = hashlib.sha256(quoted.encode("utf-8")).hexdigest()
        return _converted(task.owner_id, key, name, lambda: quoted)
    if name == "md":
        return storage.read_result(task.result_id)
    return _converted(
        task.owner_id,
        task.result_sha256,
        name,
        lambda: storage.read_result(task.result_id).decode("utf-8"),
    )


def _converted(owner_id, key: str, name: str, markdown_of) -> bytes:
    """Return the conversion kept under `key`, or make and keep it. The owner's conversions
    in this process run one at a time, and the kept conversion is read again once it is
    their turn: a request that waited for the same one is served it."""
    data = cache.read(key, name)
    if data is not None:
        return data
    deadline = time.monotonic() + WAIT_FOR_SLOT_S
    with _owners_turn(owner_id, deadline):
        data = cache.read(key, name)
        if data is None:
            data = convert(markdown_of(), name, max(0.0, deadline - time.monotonic()))
            cache.save(key, name, data)
    return data


def _busy(why: str) -> ConversionFailed:
    """The 503 of a conversion that waited its WAIT_FOR_SLOT_S: `why`, and when to ask again
    (the Retry-After's wait), the Markdown being ready meanwhile."""
    return ConversionFailed(
        503,
        f"{why}; try again in {RETRY_AFTER_S} s, or download the Markdown now.",
        retry_after_s=RETRY_AFTER_S,
    )


@contextmanager
def _owners_turn(owner_id, deadline: float) -> Iterator[None]:
    """Wait until no other conversion of `owner_id`'s runs in this process, at most until
    `deadline` (then raise the 503 of a busy server), and hold the owner's turn."""
    with _owners_changed:
        free = _owners_changed.wait_for(
            lambda: owner_id not in _owners, timeout=max(0.0, deadline - time.monotonic())
        )
        if not free:
            raise _busy("Your other downloads are being converted, one at a time")
        _owners.add(owner_id)
    try:
        yield
    finally:
        with _owners_changed:
            _owners.discard(owner_id)
            _owners_changed.notify_all()


def convert(markdown: str, name: str, wait_s: float = WAIT_FOR_SLOT_S) -> bytes:
    """Return `markdown` converted to format `name`, waiting at most `wait_s` for a free
    slot; raise ConversionFailed."""
    entry = FORMATS[name].child
    assert entry is not None, "Markdown is served as it was saved"
    if not _slots.acquire(timeout=wait_s):
        raise _busy("Too many reports are being converted")
    try:
        return base64.b64decode(sandbox.run(entry, markdown.encode("utf-8"), LIMITS))
    except (ParseError, sandbox.Stopped) as exc:
        raise ConversionFailed(
            500,
            f"The report could not be converted to {name}; its Markdown can still be downloaded.",
            str(exc),
        ) from None
    finally:
        _slots.release()
