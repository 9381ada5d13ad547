"""Reading a submission from a request: the form of POST /api/tasks and of a retry, checked
field by field and file by file, before anything is stored (reports.submissions then creates
the task)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import PurePath

from django.conf import settings

from reports import submissions
from reports.auth import MB, ApiError, raise_if_upload_stopped
from reports.parsers import SUPPORTED_EXTENSIONS, parser_for
from reports.parsers.base import InvalidContent, UnsupportedContent
from reports.submissions import Submission, Upload, limits

IDEMPOTENCY_KEY = re.compile(r"[\x20-\x7e]{1,255}")
# Control characters other than tab and newline; PostgreSQL refuses NUL in text outright.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Combining marks stacked on one character ("zalgo" text) beyond what any script needs.
MAX_COMBINING_MARKS = 3
_COMBINING_RUN = re.compile(
    "[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]"
    f"{{{MAX_COMBINING_MARKS + 1},}}"
)


def clean_text(text: str) -> str:
    """Return form text fit for the database: no NUL or other control characters."""
    return _CONTROL.sub("", text.replace("\r\n", "\n"))


def read_idempotency_key(request) -> str | None:
    """Return the request's Idempotency-Key header, or raise ApiError 400 for a bad one."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
        raise ApiError(
            400, "invalid_request", "Idempotency-Key must be 1 to 255 printable ASCII characters."
        )
    return key


# The form's text fields. Sent as a file part (`curl -F instructions=@notes.txt`), one would
# be left out of request.POST and the task made without it: refused instead, by name.
TEXT_FIELDS = ("instructions", "scenario", "reuse")


def refuse_text_fields_sent_as_files(request) -> None:
    """Raise ApiError 400 when a text field of the form came as a file part."""
    for field in TEXT_FIELDS:
        if field in request.FILES:
            raise ApiError(
                400,
                "invalid_request",
                f"'{field}' was sent as a file; send it as a text field of the form.",
            )


def read_instructions(raw: str) -> str:
    """Return form instructions fit to store, or raise ApiError 400 when they are too long."""
    instructions = clean_text(raw).strip()
    if len(instructions) > settings.REPORTS_MAX_INSTRUCTIONS_CHARS:
        raise ApiError(
            400,
            "invalid_request",
            f"Instructions are limited to {settings.REPORTS_MAX_INSTRUCTIONS_CHARS} characters.",
        )
    return instructions


def read_submission(request, user) -> Submission:
    """Return the checked submission of `user`'s POST /api/tasks, or raise ApiError."""
    key = read_idempotency_key(request)
    files = request.FILES.getlist("files")
    # The upload limits may have stopped the parse: what arrived is incomplete.
    raise_if_upload_stopped(request)
    refuse_text_fields_sent_as_files(request)
    if not files:
        raise ApiError(400, "invalid_request", _why_no_files(request))
    if len(files) > settings.REPORTS_MAX_FILES:
        raise ApiError(
            413, "file_too_large", f"At most {settings.REPORTS_MAX_FILES} files per request."
        )
    instructions = read_instructions(request.POST.get("instructions", ""))
    scenario = request.POST.get("scenario", "").strip() or "ok"
    submissions.check_scenario(scenario)
    # docs/api.md: reuse is opt-in; without it a new task is always created.
    reuse = request.POST.get("reuse", "").strip().lower() in {"1", "true", "on", "yes"}
    if not reuse and (key is None or not submissions.key_used(user, key)):
        # A new task is asked for: a user past a limit is refused before the files cost
        # any checking (submit checks again, under the admission lock).
        limits.check(user, sum(f.size for f in files))
    uploads = tuple(_checked_upload(f) for f in files)
    total = sum(len(u.data) for u in uploads)
    if total > settings.REPORTS_MAX_REQUEST_MB * MB:
        raise ApiError(
            413,
            "file_too_large",
            f"The files add up to more than {settings.REPORTS_MAX_REQUEST_MB:g} MB.",
        )
    return Submission(uploads, instructions, scenario, key, reuse)


def _why_no_files(request) -> str:
    """Say why a request brought no file: nothing was sent, or what was sent was unreadable."""
    if "chunked" in request.headers.get("Transfer-Encoding", "").lower():
        # Django reads a body only up to its Content-Length: a chunked body is never read.
        return "Uploads must be sent with a Content-Length; a chunked request body is not read."
    if request.POST or not int(request.META.get("CONTENT_LENGTH") or 0):
        return "Choose at least one file to upload."
    # A body arrived, yet no part of it was a readable field or file: Django skips a part
    # whose headers are not UTF-8, such as a file name in another encoding.
    return (
        "No file could be read from the upload: send each file as a form part named "
        "'files', with a file name in UTF-8."
    )


def _checked_upload(file) -> Upload:
    name = display_name(file.name or "")
    if file.size > settings.REPORTS_MAX_FILE_MB * MB:
        raise ApiError(
            413,
            "file_too_large",
            f"{name} is over the limit of {settings.REPORTS_MAX_FILE_MB:g} MB a file.",
        )
    extension = PurePath(name).suffix.lower()
    parser = parser_for(name)
    if parser is None:
        raise ApiError(
            415,
            "unsupported_media_type",
            f"{name}: only {' '.join(SUPPORTED_EXTENSIONS)} files are accepted.",
        )
    data = file.read()
    if not data.strip():
        raise ApiError(400, "invalid_request", f"{name} is empty.")
    try:
        parser.check(data)
    except UnsupportedContent as exc:
        raise ApiError(415, "unsupported_media_type", f"{name}: {exc}") from None
    except InvalidContent as exc:
        raise ApiError(400, "invalid_request", f"{name}: {exc}") from None
    return Upload(name, extension, data)


def display_name(raw: str) -> str:
    """Return the file's own name as the user gave it (reports.upload_names keeps it whole):
    no folders, no control or direction-changing characters, no towers of combining marks,
    not too long."""
    name = unicodedata.normalize("NFC", raw).rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if ch.isprintable()).strip()
    name = _COMBINING_RUN.sub(lambda m: m[0][:MAX_COMBINING_MARKS], name) or "upload"
    if len(name) > 200:
        stem, dot, ext = name.rpartition(".")
        name = (stem[:190] + "…" + dot + ext) if dot and len(ext) <= 8 else name[:200]
    return name
