"""Keeping the file name a user gave while a multipart upload is parsed.

Django's multipart parser cuts a file name at its last `/` and at its last `\\`, unescapes
HTML entities in it and leaves a browser's own escapes in place, so "notes <a\\b>.md" arrives
as "b>.md" and a `"` as `%22`. Our storage never uses the name (uploads are stored under
random names), so the name is kept whole here and made fit for display afterwards by
`reports.submissions.form.display_name`.
"""

from __future__ import annotations

import re

from django.http import HttpRequest
from django.http.multipartparser import MultiPartParser

# The HTML standard's multipart encoding escapes these three in a file name; a name that
# really held the text "%22" cannot be told apart from one that held a quote.
_BROWSER_ESCAPES = {"%22": '"', "%0D": "", "%0A": ""}
_BROWSER_ESCAPE = re.compile("|".join(_BROWSER_ESCAPES), re.IGNORECASE)
# A Windows path ("C:\\Users\\…\\notes.md", "..\\notes.md"), as very old browsers and
# hostile clients send it: the name is its last part. Any other backslash belongs to the name.
_WINDOWS_PATH = re.compile(r"^(?:[A-Za-z]:|\.\.?)?\\(?:[^\\]*\\)*")


def user_file_name(raw: str) -> str | None:
    """Return the name in a form part's `filename` as the user gave it, without any
    folders before it; None for a name that says nothing (no file was chosen)."""
    name = _BROWSER_ESCAPE.sub(lambda m: _BROWSER_ESCAPES[m[0].upper()], raw)
    name = "".join(ch for ch in name.rsplit("/", 1)[-1] if ch.isprintable()).strip()
    name = _WINDOWS_PATH.sub("", name)
    return None if name.strip() in {"", ".", ".."} else name


class UserNamedMultiPartParser(MultiPartParser):
    """Django's multipart parser, but keeping each file's name as the user gave it."""

    def sanitize_file_name(self, file_name: str) -> str | None:
        return user_file_name(file_name)


def install(request: HttpRequest) -> None:
    """Parse the request's upload (when its body is read) with `UserNamedMultiPartParser`."""
    request.multipart_parser_class = UserNamedMultiPartParser
