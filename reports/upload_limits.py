"""Size limits enforced while a multipart upload is parsed, not after.

`UploadLimits` goes first in a request's upload handlers. It counts the bytes of each
file and of all files together as Django's multipart parser hands them over, and stops
the parse at the first chunk over a limit: the rest of the body is not read, and the
files received so far are dropped. What was wrong is kept on the request (see
`stopped`), so that the view answers docs/api.md's 413 instead of mistaking the cut-short
form for one with no file.
"""

from __future__ import annotations

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import HttpRequest

MB = 1024 * 1024
_STOPPED = "_upload_stopped"


class UploadLimits(FileUploadHandler):
    """Stop the upload at the first byte over `REPORTS_MAX_FILE_MB` or `…_REQUEST_MB`."""

    def __init__(self, request: HttpRequest) -> None:
        super().__init__(request)
        self.file_limit = int(settings.REPORTS_MAX_FILE_MB * MB)
        self.request_limit = int(settings.REPORTS_MAX_REQUEST_MB * MB)
        self.request_bytes = 0
        self.file_bytes = 0

    def new_file(self, *args, **kwargs) -> None:
        super().new_file(*args, **kwargs)
        self.file_bytes = 0

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.file_bytes += len(raw_data)
        self.request_bytes += len(raw_data)
        if self.file_bytes > self.file_limit:
            # Django's parser has already cut the name to its last part, printable only.
            self._stop(
                f"{self.file_name} is over the limit of {settings.REPORTS_MAX_FILE_MB:g} MB a file."
            )
        if self.request_bytes > self.request_limit:
            self._stop(f"The files add up to more than {settings.REPORTS_MAX_REQUEST_MB:g} MB.")
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None  # the next handler (memory or temporary file) makes the file

    def _stop(self, message: str) -> None:
        setattr(self.request, _STOPPED, message)
        # connection_reset: Django neither reads nor drains the rest of the body.
        raise StopUpload(connection_reset=True)


def install(request: HttpRequest) -> None:
    """Put the limits in front of the request's upload handlers (before its body is read)."""
    request.upload_handlers.insert(0, UploadLimits(request))


def stopped(request: HttpRequest) -> str | None:
    """Return why the limits stopped this request's upload, or None if they did not."""
    return getattr(request, _STOPPED, None)
