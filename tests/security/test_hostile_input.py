"""Hostile input at every door of POST /api/tasks and of the parse stage.

Each attack is answered with its docs/api.md status and code and a message that says what was
wrong (or, for what only the parse stage can see, `failed` / `invalid_input`), nothing is
half-created, and the server still turns a good upload into a report afterwards.
"""

from __future__ import annotations

import io
import json
import re
import time
import zipfile

import pytest
from django.core.handlers.wsgi import LimitedStream
from django.http.multipartparser import MultiPartParser
from django.test import Client, RequestFactory
from django.test.client import encode_multipart

from reports import api, upload_limits
from reports.auth import ApiError, raise_if_upload_stopped
from reports.models import Attempt, Document, Status, Task, TaskEvent
from reports.parsers.base import ParseError
from reports.parsers.docx import document_text
from reports.parsers.html import HtmlParser
from tests.helpers import (
    SAMPLE,
    assert_refused,
    multipart,
    run_all,
    snapshot,
    stored_uploads,
    submit,
    task_of,
    upload,
)
from tests.parsers import samples
from tests.parsers.samples import DOCX
from tests.security import hostile

pytestmark = pytest.mark.django_db

BOUNDARY = "hostile-boundary"
MB = 1024 * 1024


def assert_still_healthy(client: Client, worker) -> None:
    """A good upload after the attack is accepted and becomes a report."""
    response = submit(client, upload("after.md", SAMPLE))
    assert response.status_code == 201, response.content
    run_all(worker)
    assert task_of(response).status == Status.SUCCEEDED


# --- size: stopped while the body is parsed -------------------------------------------------


class CountingStream(io.BytesIO):
    """A request body that remembers how many bytes were read from it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self.bytes_read += len(chunk)
        return chunk

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        self.bytes_read += len(line)
        return line


def test_an_oversize_file_is_stopped_after_a_small_part_of_the_body_is_read(alice_token, settings):
    settings.REPORTS_MAX_FILE_MB = 0.1  # about 100 KB a file; the request limit stays 25 MB
    body = encode_multipart(
        BOUNDARY,
        {"files": [upload("huge.md", b"x" * (8 * MB)), upload("later.md", SAMPLE)]},
    )
    request = RequestFactory().post(
        "/api/tasks",
        body,
        content_type=f"multipart/form-data; boundary={BOUNDARY}",
        headers={"Authorization": f"Bearer {alice_token}"},
    )
    stream = CountingStream(body)
    request._stream = LimitedStream(stream, len(body))

    response = api.tasks(request)
    response.json = lambda: json.loads(response.content)  # as the test client's responses

    assert_refused(response, 413, "file_too_large", "huge.md", "0.1 MB a file")
    # Stopped within a few 64 KB chunks of the limit, not after reading 8 MB.
    assert stream.bytes_read < 512 * 1024 < len(body)
    assert snapshot() == (0, 0, [])


def test_the_request_limit_stops_the_parse_at_the_file_that_crosses_it(settings, alice):
    settings.REPORTS_MAX_REQUEST_MB = 1
    files = [upload(f"part{i}.md", b"y" * (400 * 1024)) for i in range(6)]
    body = encode_multipart(BOUNDARY, {"files": files})
    request = RequestFactory().post(
        "/api/tasks", body, content_type=f"multipart/form-data; boundary={BOUNDARY}"
    )
    stream = CountingStream(body)
    limits = upload_limits.UploadLimits(request)
    parser = MultiPartParser(request.META, stream, [limits, *request.upload_handlers])

    _, parsed = parser.parse()

    # Two whole files fit; the third crosses 1 MB and ends the parse, dropping it.
    assert [f.name for f in parsed.getlist("files")] == ["part0.md", "part1.md"]
    assert stream.bytes_read < 1.5 * MB < len(body)
    with pytest.raises(ApiError) as refused:
        raise_if_upload_stopped(request)
    assert (refused.value.status, refused.value.code) == (413, "file_too_large")
    assert "1 MB" in refused.value.message


def test_a_stopped_upload_never_passes_for_a_form_with_fewer_files(alice_client, settings):
    settings.REPORTS_MAX_FILE_MB = 0.05
    response = submit(alice_client, upload("good.md", SAMPLE), upload("big.md", b"z" * MB))
    assert_refused(response, 413, "file_too_large", "big.md")
    assert snapshot() == (0, 0, [])


def test_a_stopped_upload_that_lost_its_csrf_token_is_still_answered_413(alice, settings):
    settings.REPORTS_MAX_FILE_MB = 0.05
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get("/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    # The token field comes after the file, as a hand-made form may send it.
    response = client.post(
        "/api/tasks", {"files": [upload("big.md", b"z" * MB)], "csrfmiddlewaretoken": token}
    )
    assert_refused(response, 413, "file_too_large", "big.md")
    assert snapshot() == (0, 0, [])


# --- refused at submit ------------------------------------------------------------------------

# id, file name, bytes, status, code, words of the message
REFUSED = [
    ("html-named-pdf", "report.pdf", b"<html><p>not a pdf</p></html>", 415, "unsupported", ["PDF"]),
    ("png-named-docx", "photo.docx", samples.PNG, 415, "unsupported", [".docx"]),
    ("png-named-txt", "notes.txt", samples.PNG, 415, "unsupported", ["PNG"]),
    ("elf-named-md", "notes.md", b"\x7fELF\x02\x01\x01" + b"\x00" * 64, 415, "unsupported", []),
    ("gzip-named-html", "page.html", b"\x1f\x8b\x08\x00abc", 415, "unsupported", ["gzip"]),
    ("legacy-doc-named-docx", "old.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 512,
     415, "unsupported", ["password-protected"]),
    ("double-extension-exe", "invoice.pdf.exe", b"MZ\x90\x00", 415, "unsupported", [".pdf"]),
    ("double-extension-pdf-in-txt", "notes.md.txt", samples.text_pdf("Hi"), 415, "unsupported",
     ["PDF"]),
    ("double-extension-zip", "report.docx.zip", DOCX, 415, "unsupported", [".docx"]),
    ("trailing-dot", "report.md.", SAMPLE.encode(), 415, "unsupported", []),
    ("rtl-override-hides-exe", "invoice\u202eexe.md", b"MZ\x90\x00", 415, "unsupported", []),
    ("zip-bomb-docx", "bomb.docx", hostile.zip_bomb_docx(), 400, "invalid_request",
     ["zip bomb"]),
    ("billion-laughs-docx", "laughs.docx", hostile.billion_laughs_docx(), 400,
     "invalid_request", ["ENTITY"]),
    ("empty-pdf", "empty.pdf", b"", 400, "invalid_request", ["empty"]),
    ("whitespace-only-md", "blank.md", b" \r\n\t \n", 400, "invalid_request", ["empty"]),
    ("whitespace-only-utf16", "blank.txt", " \n \n".encode("utf-16"), 400, "invalid_request",
     ["empty"]),
    ("tags-only-html", "blank.html", b"<html><head><title>t</title></head><body> </body></html>",
     400, "invalid_request", ["visible text"]),
    ("undecodable-text", "noise.txt", bytes(range(0x80, 0x100)) * 20, 400, "invalid_request",
     ["UTF-8"]),
    ("nul-bytes-without-bom", "nul.md", b"# Title\x00\x00 text", 415, "unsupported",
     ["binary"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "data", "status", "code", "hints"),
    [pytest.param(*case[1:], id=case[0]) for case in REFUSED],
)
def test_a_hostile_upload_is_refused_leaves_nothing_and_the_server_goes_on(
    alice_client, worker, name, data, status, code, hints
):
    code = "unsupported_media_type" if code == "unsupported" else code
    response = submit(alice_client, upload(name, data))
    assert_refused(response, status, code, *hints)
    assert snapshot() == (0, 0, [])
    assert_still_healthy(alice_client, worker)


# --- file names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw_name", "shown"),
    [
        ("../../../../etc/passwd.md", "passwd.md"),
        ("..\\..\\windows\\system32\\notes.md", "notes.md"),
        ("notes.exe\x00.md", "notes.exe.md"),
        ("invoice\u202egpj.md", "invoicegpj.md"),  # the right-to-left override is dropped
        ("zero\u200bwidth\ufeff.md", "zerowidth.md"),
        ("Ze\u0301\u0301\u0301\u0301\u0301\u0301\u0301\u0301lgo.md", "Zé\u0301\u0301\u0301lgo.md"),
        ("<img src=x onerror=alert(1)>.md", "<img src=x onerror=alert(1)>.md"),
    ],
)
def test_a_hostile_file_name_is_normalised_and_never_used_on_disk(alice_client, raw_name, shown):
    body, content_type = multipart(raw_name, SAMPLE.encode())
    response = alice_client.post("/api/tasks", body, content_type=content_type)
    assert response.status_code == 201, response.content
    document = Document.objects.get()
    assert document.name == shown
    assert stored_uploads() == [document.storage_name]
    assert len(document.storage_name) == 32 and document.storage_name.isalnum()


def test_a_nul_byte_cannot_hide_the_real_extension(alice_client):
    body, content_type = multipart("notes.md\x00.exe", SAMPLE.encode())
    response = alice_client.post("/api/tasks", body, content_type=content_type)
    assert_refused(response, 415, "unsupported_media_type", "notes.md.exe")
    assert snapshot() == (0, 0, [])


def test_a_long_file_name_is_shortened_for_storage_and_display(alice_client):
    body, content_type = multipart("\u00e9" * 400 + ".md", SAMPLE.encode())
    response = alice_client.post("/api/tasks", body, content_type=content_type)
    assert response.status_code == 201, response.content
    name = Document.objects.get().name
    assert len(name) <= 200 and name.endswith("….md")


def test_a_file_name_too_long_for_a_form_header_is_a_400_not_a_crash(alice_client, worker):
    body, content_type = multipart("\u00e9" * 5000 + ".md", SAMPLE.encode())
    response = alice_client.post("/api/tasks", body, content_type=content_type)
    assert_refused(response, 400, "invalid_request", "header")
    assert snapshot() == (0, 0, [])
    assert_still_healthy(alice_client, worker)


# --- refused at the parse stage ---------------------------------------------------------------


def fails_at_parse(client: Client, worker, name: str, data: bytes) -> Task:
    response = submit(client, upload(name, data))
    assert response.status_code == 201, response.content
    run_all(worker)
    task = task_of(response)
    assert (task.status, task.error_type) == (Status.FAILED, "invalid_input")
    body = client.get(f"/api/tasks/{task.pk}").json()
    assert body["error"] == {"type": "invalid_input", "message": task.user_message}
    assert name in task.user_message
    # Nothing came of it but the failure: no text, no result.
    assert body["text_length"] == 0 and body["result"] is None
    return task


def test_a_pdf_that_explodes_on_parse_is_stopped_by_the_cpu_limit(alice_client, worker, settings):
    settings.REPORTS_PARSE_CPU_S = 1
    task = fails_at_parse(alice_client, worker, "flood.pdf", hostile.pdf_that_explodes())
    assert "took too long to read (1 s of CPU time)" in task.user_message
    assert_still_healthy(alice_client, worker)


def test_a_docx_that_stalls_its_parser_is_stopped_by_the_cpu_limit(alice_client, worker, settings):
    settings.REPORTS_PARSE_CPU_S = 1
    task = fails_at_parse(alice_client, worker, "long.docx", hostile.docx_that_stalls())
    assert "took too long to read (1 s of CPU time)" in task.user_message
    assert_still_healthy(alice_client, worker)


def test_a_pdf_with_a_huge_page_tree_is_stopped_by_the_wall_clock(alice_client, worker, settings):
    settings.REPORTS_PARSE_TIMEOUT_S = 1.5
    task = fails_at_parse(alice_client, worker, "pages.pdf", hostile.pdf_with_a_huge_page_tree())
    assert "took too long to read (1.5 s)" in task.user_message
    assert_still_healthy(alice_client, worker)


def test_a_pdf_that_needs_too_much_memory_is_stopped_by_the_memory_limit(
    alice_client, worker, settings
):
    settings.REPORTS_PARSE_MEMORY_MB = 160
    task = fails_at_parse(alice_client, worker, "flood.pdf", hostile.pdf_that_explodes())
    # PDFium reports an allocation refused at the limit as an unreadable page, or the child
    # fails to allocate itself: either way the document, not the server, is stopped.
    assert "needs too much memory" in task.user_message or "could not be read" in (
        task.user_message
    )
    # Under the same limit an ordinary PDF is read: it was the document, not the limit.
    submit(alice_client, upload("fine.pdf", samples.text_pdf(SAMPLE.replace("\n", " "))))
    run_all(worker)
    assert Task.objects.filter(status=Status.SUCCEEDED).count() == 1
    assert_still_healthy(alice_client, worker)


def test_a_page_too_slow_to_read_is_stopped_by_the_cpu_limit(alice_client, worker, settings):
    settings.REPORTS_PARSE_CPU_S = 1
    task = fails_at_parse(alice_client, worker, "slow.html", hostile.slow_html())
    assert "took too long to read (1 s of CPU time)" in task.user_message
    assert_still_healthy(alice_client, worker)


# --- the upload check: answered in bounded time, its cost counted -----------------------------


def test_the_red_teams_nested_page_is_refused_at_upload_in_bounded_time(alice_client, worker):
    # 68.8 s of the web process's CPU before its 400; CPU time, so a busy machine cannot
    # make it pass or fail.
    started = time.process_time()
    response = submit(alice_client, upload("c.html", hostile.nested_html()))
    assert time.process_time() - started < 2
    assert_refused(response, 400, "invalid_request", "visible text")
    assert snapshot() == (0, 0, [])
    assert_still_healthy(alice_client, worker)


def test_a_page_only_a_whole_parse_can_judge_is_a_task_counted_against_the_rate_limit(
    alice_client, worker, settings
):
    settings.REPORTS_USER_RATE_LIMIT = 1
    started = time.process_time()
    response = submit(alice_client, upload("hidden.html", hostile.html_hiding_its_text()))
    assert time.process_time() - started < 2
    assert response.status_code == 201, response.content
    # Whatever reading it costs is spent as a task of the user's, so it counts.
    again = submit(alice_client, upload("hidden.html", hostile.html_hiding_its_text()))
    assert_refused(again, 429, "rate_limited")
    run_all(worker)
    task = task_of(response)
    assert (task.status, task.error_type) == (Status.FAILED, "invalid_input")
    assert "no visible text" in task.user_message


def test_a_user_past_the_rate_limit_is_refused_before_the_files_are_checked(
    alice_client, settings, monkeypatch
):
    settings.REPORTS_USER_RATE_LIMIT = 1
    assert submit(alice_client, upload("first.md", SAMPLE)).status_code == 201
    checked = []
    monkeypatch.setattr(HtmlParser, "check", lambda self, data: checked.append(len(data)))

    response = submit(alice_client, upload("c.html", hostile.nested_html()))
    assert_refused(response, 429, "rate_limited")
    assert checked == []  # the refusal cost no reading of the page
    # A replay of a key that made a task is still answered, rate limit or not.
    key = {"Idempotency-Key": "one-key"}
    settings.REPORTS_USER_RATE_LIMIT = 2
    made = submit(alice_client, upload("again.md", SAMPLE), headers=key)
    assert made.status_code == 201
    assert submit(alice_client, upload("again.md", SAMPLE), headers=key).status_code == 200


def test_a_large_text_of_mixed_encodings_is_accepted_in_bounded_time(alice_client, worker):
    started = time.process_time()
    response = submit(alice_client, upload("mixed.txt", hostile.mixed_encoding_text(9)))
    assert time.process_time() - started < 3
    assert response.status_code == 201, response.content


@pytest.mark.parametrize(
    ("name", "data", "hint"),
    [
        ("locked.pdf", samples.encrypted_pdf(samples.text_pdf("Secret"), "pw"), "password"),
        ("scan.pdf", samples.image_pdf(), "no text layer"),
        ("broken.pdf", b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage", "damaged"),
    ],
    ids=["encrypted", "image-only", "damaged"],
)
def test_a_pdf_without_readable_text_fails_as_invalid_input(alice_client, worker, name, data, hint):
    task = fails_at_parse(alice_client, worker, name, data)
    assert hint in task.user_message
    assert_still_healthy(alice_client, worker)


# --- encodings and NUL bytes -------------------------------------------------------------------


def report_text(client: Client, response) -> str:
    task = task_of(response)
    assert task.status == Status.SUCCEEDED, task.user_message
    download = client.get(f"/api/tasks/{task.pk}/result")
    return download.content.decode()


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("cp1252.txt", SAMPLE.replace("Brittany", "Bretagne café").encode("cp1252"), "café"),
        (
            "mixed.md",
            SAMPLE.replace("Brittany", "Bretagne café").encode() + "naïve".encode("cp1252"),
            "café",
        ),
        ("utf16.txt", SAMPLE.replace("Brittany", "Bretagne\x00 café").encode("utf-16"), "café"),
        ("nul.html", f"<h1>Tidal</h1><p>{SAMPLE}&#0;</p>".encode(), "Tidal"),
    ],
    ids=["windows-1252", "mixed-utf8-and-1252", "utf16-with-nul", "html-nul-reference"],
)
def test_other_encodings_are_decoded_and_nul_never_reaches_the_database(
    alice_client, worker, name, data, expected
):
    response = submit(alice_client, upload(name, data), instructions="Focus\x00 on costs")
    assert response.status_code == 201, response.content
    run_all(worker)
    text = report_text(alice_client, response)
    assert expected in text and "\x00" not in text
    task = task_of(response)
    assert task.instructions == "Focus on costs"
    assert "\x00" not in "".join(Attempt.objects.values_list("text", flat=True))


def test_nul_and_lone_surrogates_in_the_models_output_never_reach_the_database(
    alice_client, scripted_worker
):
    from reports.providers.base import Completed, TextDelta, Usage

    async def script(request, clock):
        # A lone surrogate is what a broken server's "\\ud800" JSON escape decodes to.
        for piece in [
            "# Re\x00port \ud800\n\n## Summary\n\nIt\x00 works.\n\n",
            "## More\n\nText.\n",
        ]:
            yield TextDelta(piece)
        yield Completed("stop", Usage(1, 2, None, "provider"))

    response = submit(alice_client)
    run_all(scripted_worker(script))
    text = report_text(alice_client, response)
    assert text.startswith("# Report \ufffd\n") and "\x00" not in text
    deltas = TaskEvent.objects.filter(task=task_of(response), type="delta")
    assert "\x00" not in "".join(e.data["text"] for e in deltas)


# --- XML parts that hide their nature -------------------------------------------------------

MAIN = "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"
XXE = (
    '<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY xxe SYSTEM "file:///etc/hostname">]>'
    '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
    "<w:body><w:p><w:r><w:t>&xxe;</w:t></w:r></w:p></w:body></w:document>"
)


def with_part(name: str, content: bytes, content_type: str = MAIN) -> bytes:
    """Return the sample .docx with one more part, declared with `content_type`."""
    with zipfile.ZipFile(io.BytesIO(DOCX)) as archive:
        types = archive.read("[Content_Types].xml").decode()
    override = f'<Override PartName="/{name}" ContentType="{content_type}"/>'
    types = types.replace("</Types>", override + "</Types>")
    return samples.rezip(DOCX, replace={"[Content_Types].xml": types.encode()}, add={name: content})


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("word/main.dat", XXE.encode()),  # declared XML, whatever its name
        ("word/main.dat", XXE.encode("utf-16")),
        ("word/main.dat", XXE.encode("utf-32")),
        ("customXml/item9.bin", XXE.encode()),
    ],
    ids=["named-dat", "utf-16", "utf-32", "named-bin"],
)
def test_a_declaration_in_an_xml_part_of_any_name_is_refused(alice_client, name, content):
    before = snapshot()
    response = submit(alice_client, upload("tricked.docx", with_part(name, content)))
    assert_refused(response, 400, "invalid_request", "DOCTYPE")
    assert snapshot() == before


@pytest.mark.parametrize(
    "content",
    [
        XXE.replace('version="1.0"', 'version="1.0" encoding="UTF-7"').encode(),
        XXE.replace('version="1.0"', 'version="1.0" encoding="IBM037"').encode("cp037"),
    ],
    ids=["utf-7", "ebcdic"],
)
def test_an_xml_part_in_an_encoding_word_never_writes_is_refused(alice_client, content):
    response = submit(alice_client, upload("tricked.docx", with_part("word/main.dat", content)))
    assert_refused(response, 400, "invalid_request", "encoding")


def declared_as_image(name: str, content: bytes) -> bytes:
    """Return the sample .docx with `name` replaced by `content`, and the package declaring
    that part (by an Override, and `.rels` parts by their extension's Default) an image."""
    with zipfile.ZipFile(io.BytesIO(DOCX)) as archive:
        types = archive.read("[Content_Types].xml").decode()
    types = re.sub(r'(Extension="rels" ContentType=")[^"]*', r"\1image/png", types)
    override = f'<Override PartName="/{name}" ContentType="image/png"/>'
    types = types.replace("</Types>", override + "</Types>")
    return samples.rezip(DOCX, replace={"[Content_Types].xml": types.encode(), name: content})


RELS_WITH_ENTITIES = (
    '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY t "http://schemas.openxmlformats.org/'
    'officeDocument/2006/relationships/officeDocument">]>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" Type="&t;" Target="word/document.xml"/></Relationships>'
)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("_rels/.rels", RELS_WITH_ENTITIES.encode()),
        ("word/_rels/document.xml.rels", RELS_WITH_ENTITIES.encode("utf-16")),
        ("word/document.xml", XXE.encode()),
    ],
    ids=["package-rels", "part-rels-utf-16", "main-document"],
)
def test_an_xml_part_declared_as_an_image_is_still_scanned(alice_client, name, content):
    """python-docx reads relationships and `.xml` parts as XML by their path, whatever the
    package declares: a declaration in one is refused at submit and in the parse stage."""
    tricked = declared_as_image(name, content)
    assert b"image/png" in zipfile.ZipFile(io.BytesIO(tricked)).read("[Content_Types].xml")
    before = snapshot()
    response = submit(alice_client, upload("tricked.docx", tricked))
    assert_refused(response, 400, "invalid_request", "DOCTYPE")
    assert snapshot() == before
    with pytest.raises(ParseError, match="DOCTYPE or ENTITY"):
        document_text(tricked)


def test_a_part_declared_as_an_image_is_not_read_as_xml(alice_client):
    # An image may hold any bytes, even these; nothing reads it as XML.
    image = with_part("word/media/image9.png", b"\x89PNG<!DOCTYPE x>", "image/png")
    assert submit(alice_client, upload("picture.docx", image)).status_code == 201
