"""The names a report is downloaded under, the header that carries them (RFC 6266), and
the download itself.

A report is named after its first document, as the user named it ("Résumé «final».md" →
"Résumé «final»-report.md"). The header gives that name as `filename*` (UTF-8) and, for
clients that read only `filename`, an ASCII stand-in made of the same name's letters.
"""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import quote

from django.http import HttpResponse

from reports.models import CompiledRead, Document, Task

MAX_STEM = 100
# What an ASCII `filename` keeps: letters, digits and a few marks no system objects to.
_NOT_PLAIN = re.compile(r"[^A-Za-z0-9._()+,=]+")


# Every report's outcome on its pages names its file: compiled once (reports.models.compiled).
_FIRST_NAME = CompiledRead(
    lambda task_id: (
        Document.objects.filter(task_id=task_id).order_by("position").values_list("name")[:1]
    ),
    lambda task_id: [(Document._meta.get_field("task"), task_id)],
)


def report_file_name(task: Task, extension: str = "md") -> str:
    """Return the name of `task`'s report as a file: `<first document>-report.<extension>`."""
    first = _FIRST_NAME.first(task.pk)
    stem = first[0].rsplit(".", 1)[0] if first is not None else ""
    # No control character or folder reaches a file name; the rest is the user's.
    stem = "".join(ch for ch in stem if ch.isprintable() and ch != "/")
    stem = stem.strip(" .")[:MAX_STEM].strip(" .")
    return f"{stem or 'report'}-report.{extension}"


def ascii_file_name(name: str) -> str:
    """Return `name` in printable ASCII: accents dropped, every other run of marks one `-`."""
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    stem, dot, extension = plain.rpartition(".")
    stem = re.sub("-+", "-", _NOT_PLAIN.sub("-", stem if dot else plain)).strip(".-")
    extension = _NOT_PLAIN.sub("", extension) if dot else ""
    return f"{stem or 'report'}{'.' + extension if extension else ''}"


def attachment(name: str) -> str:
    """Return a Content-Disposition header that saves the response as `name`."""
    fallback = ascii_file_name(name)
    if fallback == name:
        return f'attachment; filename="{name}"'
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


def download(data: bytes, content_type: str, name: str) -> HttpResponse:
    """Return `data` as a file saved as `name`: whole, with its length. A report is at most
    REPORTS_MAX_REPORT_KB, and its conversions are made in memory: streamed from a file
    under ASGI, each piece read would be a trip to a thread of its own."""
    response = HttpResponse(data, content_type=content_type)
    response["Content-Length"] = str(len(data))
    response["Content-Disposition"] = attachment(name)
    return response
