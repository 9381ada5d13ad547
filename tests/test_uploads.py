"""POST /api/tasks, docs/api.md: every bad upload refused with its status and code and nothing
stored; every good one of the five types accepted and turned into a report."""

from __future__ import annotations

import random
import re

import pytest
from django.test import Client

from reports import events, storage
from reports.models import Document, Task
from reports.streaming.follower import events_after
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

pytestmark = pytest.mark.django_db

HTML = (
    "<!doctype html><html><head><title>Tidal energy</title><style>p{}</style></head><body>"
    "<h1>Tidal energy in small harbours</h1>"
    "<p>Tidal energy is a predictable source of power. Small harbours see two tides a day, "
    "and the difference between high and low water can drive a turbine.</p>"
    "<h2>Findings</h2><p>The best harbours had narrow entrances that speed up the flow. "
    "Turbines placed there produced steady power for eight hours a day.</p>"
    "</body></html>"
)
PDF_PAGES = (
    "Tidal energy in small harbours.\nTidal energy is a predictable source of power.",
    "Turbines in narrow harbour entrances produced steady power for eight hours a day.",
)


# 4 MB of zeros deflate to a few KB: a part compressed far beyond 100:1.
ZIP_BOMB = samples.rezip(DOCX, add={"word/media/zeros.bin": bytes(4 * 1024 * 1024)})
# Random bytes with no NUL: not UTF-8, and no encoding fits them with confidence.
NOISE = random.Random(1).randbytes(4000).replace(b"\x00", b"\x01")


# --- refused uploads ----------------------------------------------------------------------

# id, files (name, bytes), form fields, headers, settings, status, code, words of the message
REFUSALS = [
    ("no-file", [], {"instructions": "Summarise"}, {}, {}, 400, "invalid_request", ["file"]),
    ("empty-file", [("a.md", b"")], {}, {}, {}, 400, "invalid_request", ["a.md", "empty"]),
    (
        "whitespace-only",
        [("a.txt", b" \n\t\r\n  ")],
        {},
        {},
        {},
        400,
        "invalid_request",
        ["a.txt", "empty"],
    ),
    (
        "one-good-one-empty",
        [("good.md", SAMPLE.encode()), ("blank.md", b"\n\n")],
        {},
        {},
        {},
        400,
        "invalid_request",
        ["blank.md", "empty"],
    ),
    (
        "undecodable-text",
        [("notes.txt", NOISE)],
        {},
        {},
        {},
        400,
        "invalid_request",
        ["notes.txt", "UTF-8"],
    ),
    (
        "binary-with-nul-as-text",
        [("notes.txt", random.Random(2).randbytes(4000) + b"\x00")],
        {},
        {},
        {},
        415,
        "unsupported_media_type",
        ["notes.txt", "binary"],
    ),
    (
        "unknown-scenario",
        [("a.md", SAMPLE.encode())],
        {"scenario": "explode"},
        {},
        {},
        400,
        "invalid_request",
        ["scenario", "explode"],
    ),
    (
        "scenario-disallowed",
        [("a.md", SAMPLE.encode())],
        {"scenario": "error"},
        {},
        {"REPORTS_ALLOW_SCENARIOS": False},
        400,
        "invalid_request",
        ["scenario"],
    ),
    (
        "empty-idempotency-key",
        [("a.md", SAMPLE.encode())],
        {},
        {"Idempotency-Key": ""},
        {},
        400,
        "invalid_request",
        ["Idempotency-Key"],
    ),
    (
        "idempotency-key-256-chars",
        [("a.md", SAMPLE.encode())],
        {},
        {"Idempotency-Key": "k" * 256},
        {},
        400,
        "invalid_request",
        ["Idempotency-Key"],
    ),
    (
        "idempotency-key-non-printable",
        [("a.md", SAMPLE.encode())],
        {},
        {"Idempotency-Key": "abc\x01def"},
        {},
        400,
        "invalid_request",
        ["Idempotency-Key"],
    ),
    (
        "file-over-the-file-limit",
        [("big.md", SAMPLE.encode() * 3)],
        {},
        {},
        {"REPORTS_MAX_FILE_MB": 0.001},
        413,
        "file_too_large",
        ["big.md", "MB"],
    ),
    (
        "request-over-the-request-limit",
        [("a.md", SAMPLE.encode()), ("b.md", SAMPLE.encode() + b"more")],
        {},
        {},
        {"REPORTS_MAX_REQUEST_MB": 0.001},
        413,
        "file_too_large",
        ["MB"],
    ),
    (
        "too-many-files",
        [(f"part{i}.md", SAMPLE.encode()) for i in range(3)],
        {},
        {},
        {"REPORTS_MAX_FILES": 2},
        413,
        "file_too_large",
        ["2 files"],
    ),
    (
        "more-files-than-django-parses",
        [(f"part{i}.md", SAMPLE.encode()) for i in range(4)],
        {},
        {},
        {"DATA_UPLOAD_MAX_NUMBER_FILES": 3},
        413,
        "file_too_large",
        ["files"],
    ),
    (
        "exe",
        [("setup.exe", b"MZ\x90\x00 not a document")],
        {},
        {},
        {},
        415,
        "unsupported_media_type",
        ["setup.exe", ".docx"],
    ),
    (
        "no-extension",
        [("README", SAMPLE.encode())],
        {},
        {},
        {},
        415,
        "unsupported_media_type",
        ["README", ".txt"],
    ),
    (
        "png-named-pdf",
        [("scan.pdf", samples.PNG)],
        {},
        {},
        {},
        415,
        "unsupported_media_type",
        ["scan.pdf", "not a PDF"],
    ),
    (
        "pdf-named-txt",
        [("notes.txt", samples.text_pdf("Hello"))],
        {},
        {},
        {},
        415,
        "unsupported_media_type",
        ["notes.txt", "PDF"],
    ),
    (
        "zip-bomb-named-docx",
        [("bomb.docx", ZIP_BOMB)],
        {},
        {},
        {},
        400,
        "invalid_request",
        ["bomb.docx", "zip bomb"],
    ),
    (
        "plain-zip-named-docx",
        [("archive.docx", samples.zip_of({"hello.txt": b"just a zip"}))],
        {},
        {},
        {},
        415,
        "unsupported_media_type",
        ["archive.docx", ".docx"],
    ),
]


@pytest.mark.parametrize(
    ("files", "fields", "headers", "overrides", "status", "code", "hints"),
    [pytest.param(*case[1:], id=case[0]) for case in REFUSALS],
)
@pytest.mark.parametrize("auth", ["session", "token"])
def test_a_bad_upload_is_refused_and_leaves_nothing_behind(
    alice_client,
    alice_token,
    settings,
    auth,
    files,
    fields,
    headers,
    overrides,
    status,
    code,
    hints,
):
    for name, value in overrides.items():
        setattr(settings, name, value)
    if auth == "session":
        client = alice_client
    else:
        client = Client()
        headers = {**headers, "Authorization": f"Bearer {alice_token}"}
    payload = {"files": [upload(name, data) for name, data in files], **fields}

    response = client.post("/api/tasks", payload, headers=headers)

    assert_refused(response, status, code, *hints)
    assert snapshot() == (0, 0, [])


def test_an_idempotency_key_of_255_printable_characters_is_accepted(alice_client):
    key = "".join(chr(0x20 + i % 95) for i in range(255))
    response = submit(alice_client, headers={"Idempotency-Key": key})
    assert response.status_code == 201
    assert task_of(response).idempotency_key == key


def test_with_scenarios_disallowed_ok_and_no_scenario_still_work(alice_client, settings):
    settings.REPORTS_ALLOW_SCENARIOS = False
    assert submit(alice_client, scenario="ok").status_code == 201
    assert submit(alice_client).status_code == 201
    assert submit(alice_client, scenario="").status_code == 201
    assert sorted(Task.objects.values_list("scenario", flat=True)) == ["ok", "ok", "ok"]


def test_a_full_queue_answers_429_with_retry_after_and_stores_nothing(
    alice_client, make_task, settings
):
    settings.REPORTS_QUEUE_LIMIT = 1
    make_task()
    before = snapshot()

    response = submit(alice_client, upload("new.md"))

    assert_refused(response, 429, "queue_full", f"try again in {response['Retry-After']} s")
    assert re.fullmatch(r"[1-9]\d*", response["Retry-After"])
    assert snapshot() == before


def test_a_full_queue_still_replays_an_idempotent_retry(alice_client, settings):
    settings.REPORTS_QUEUE_LIMIT = 1
    key = {"Idempotency-Key": "retry-after-timeout"}
    first = submit(alice_client, upload(), headers=key)
    assert first.status_code == 201
    again = submit(alice_client, upload(), headers=key)
    assert again.status_code == 200
    assert again.json()["task_id"] == first.json()["task_id"]


def test_a_request_over_the_limit_is_refused_by_its_content_length(alice_token, settings):
    settings.REPORTS_MAX_REQUEST_MB = 1
    response = Client().post(
        "/api/tasks",
        {"files": [upload()]},
        headers={"Authorization": f"Bearer {alice_token}"},
        CONTENT_LENGTH=str(2 * 1024 * 1024),
    )
    assert_refused(response, 413, "file_too_large", "1 MB")
    assert snapshot() == (0, 0, [])


# --- accepted uploads ---------------------------------------------------------------------

GOOD = [
    ("article.txt", SAMPLE.encode()),
    ("article.md", SAMPLE.encode()),
    ("article.html", HTML.encode()),
    ("article.pdf", samples.text_pdf(*PDF_PAGES)),
    ("article.docx", DOCX),
]


def report_of(client, task_id) -> tuple[dict, str]:
    body = client.get(f"/api/tasks/{task_id}").json()
    download = client.get(f"/api/tasks/{task_id}/result")
    return body, download.content.decode()


@pytest.mark.parametrize(("name", "data"), GOOD, ids=[name for name, _ in GOOD])
def test_each_supported_type_is_accepted_and_reported_on(alice_client, worker, name, data):
    response = submit(alice_client, upload(name, data))
    assert response.status_code == 201, response.content
    document = Document.objects.get()
    assert (document.name, document.size) == (name, len(data))
    assert stored_uploads() == [document.storage_name]
    assert storage.read_upload(stored_uploads()[0]) == data

    run_all(worker)

    body, report = report_of(alice_client, response.json()["task_id"])
    assert body["status"] == "succeeded", body["error"]
    words = set(re.findall(r"[a-z]+", report.lower()))
    assert {"tidal", "energy", "harbours"} <= words, report


def test_several_files_of_different_types_make_one_report(alice_client, worker):
    files = [upload(name, data) for name, data in GOOD]
    response = submit(alice_client, *files)
    assert response.status_code == 201
    assert list(Document.objects.values_list("name", "position")) == [
        (name, i) for i, (name, _) in enumerate(GOOD)
    ]
    run_all(worker)
    body, report = report_of(alice_client, response.json()["task_id"])
    assert body["status"] == "succeeded"
    assert "harbours" in report.lower()


def test_an_image_only_pdf_is_accepted_then_fails_as_invalid_input(alice_client, worker):
    # A scan OCR finds nothing in.
    response = submit(alice_client, upload("scan.pdf", samples.blank_scan_pdf()))
    assert response.status_code == 201
    assert response.json()["status"] == "queued"

    run_all(worker)

    body = alice_client.get(f"/api/tasks/{response.json()['task_id']}").json()
    assert body["status"] == "failed"
    assert body["error"]["type"] == "invalid_input"
    assert "scan.pdf" in body["error"]["message"]
    assert "OCR found no text" in body["error"]["message"]
    assert body["partial"] is False and body["result"] is None


def test_a_scanned_pdf_is_read_by_ocr_page_by_page_and_the_report_says_so(alice_client, worker):
    pdf = samples.scanned_pdf(
        "Tidal energy in small harbours.\nThe turbines ran for eight hours.",
        "The harbour master kept the logbook.",
    )
    response = submit(alice_client, upload("scan.pdf", pdf))
    task_id = response.json()["task_id"]

    run_all(worker)

    body, report = report_of(alice_client, task_id)
    assert body["status"] == "succeeded", body["error"]
    found, _ = events_after(task_id, 0)
    assert [e.data["label"] for e in found if e.type == events.PROGRESS][:2] == [
        "Reading page 1 of 2 by OCR",
        "Reading page 2 of 2 by OCR",
    ]
    summary = report.split("## Summary\n\n", 1)[1].split("\n## ", 1)[0]
    assert "Pages 1\u20132 of **scan.pdf** were read by OCR." in summary
    # The OCR'd text is cited like any other: its passage knows its page.
    source = alice_client.get(f"/api/tasks/{task_id}/sources/S2").json()
    assert (source["document"], source["page"]) == ("scan.pdf", 2)
    assert "logbook" in source["text"]


def test_a_docx_with_no_text_is_accepted_then_fails_as_invalid_input(alice_client, worker):
    empty = samples.docx_bytes(lambda document: document.add_paragraph(""))
    response = submit(alice_client, upload("blank.docx", empty))
    assert response.status_code == 201
    run_all(worker)
    body = alice_client.get(f"/api/tasks/{response.json()['task_id']}").json()
    assert (body["status"], body["error"]["type"]) == ("failed", "invalid_input")
    assert "blank.docx" in body["error"]["message"]


# --- file names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw_name", "shown"),
    [
        ("../../etc/cron.d/Quarterly notes.md", "Quarterly notes.md"),
        ("C:\\Users\\alice\\Desktop\\Quarterly notes.md", "Quarterly notes.md"),
        ("Quarterly\x1b[31m notes\x07.md", "Quarterly[31m notes.md"),
        ("\tQuarterly notes.md\x7f", "Quarterly notes.md"),
    ],
)
def test_a_file_name_is_stored_as_a_clean_display_name_and_a_random_storage_name(
    alice_client, raw_name, shown
):
    body, content_type = multipart(raw_name, SAMPLE.encode())
    response = alice_client.post("/api/tasks", body, content_type=content_type)
    assert response.status_code == 201, response.content

    document = Document.objects.get()
    assert document.name == shown
    assert re.fullmatch(r"[0-9a-f]{32}", document.storage_name)
    assert stored_uploads() == [document.storage_name]


# As Chromium sends it: a double quote escaped as %22, a backslash as itself.
USER_NAME = 'Résumé — Q3 «final» (copy) #2 & "<b>x<\\b>" 🚀.md'
SENT_NAME = USER_NAME.replace('"', "%22")


def test_a_file_name_is_kept_as_the_user_gave_it_and_shown_escaped(alice_client, worker):
    body, content_type = multipart(SENT_NAME, SAMPLE.encode())
    response = alice_client.post("/api/tasks", body, content_type=content_type)
    assert response.status_code == 201, response.content
    assert Document.objects.get().name == USER_NAME
    run_all(worker)

    task = task_of(response)
    page = alice_client.get(f"/tasks/{task.pk}/").content.decode()
    assert "Résumé — Q3 «final» (copy) #2 &amp; &quot;&lt;b&gt;x&lt;\\b&gt;&quot; 🚀.md" in page
    assert "<b>x" not in page

    download = alice_client.get(f"/api/tasks/{task.pk}/result")
    # RFC 6266: the real name for clients that read filename*, an ASCII one for the rest.
    assert download["Content-Disposition"] == (
        'attachment; filename="Resume-Q3-final-(copy)-2-b-x-b-report.md"; '
        "filename*=UTF-8''R%C3%A9sum%C3%A9%20%E2%80%94%20Q3%20%C2%ABfinal%C2%BB%20%28copy%29"
        "%20%232%20%26%20%22%3Cb%3Ex%3C%5Cb%3E%22%20%F0%9F%9A%80-report.md"
    )


def test_a_very_long_file_name_is_shortened_keeping_its_extension(alice_client):
    response = submit(alice_client, upload("n" * 400 + ".md"))
    assert response.status_code == 201
    name = Document.objects.get().name
    assert len(name) <= 200
    assert name.endswith(".md")


def test_two_uploads_of_the_same_name_are_stored_apart(alice_client):
    submit(alice_client, upload("same.md", SAMPLE + "one"))
    submit(alice_client, upload("same.md", SAMPLE + "two"))
    names = set(Document.objects.values_list("storage_name", flat=True))
    assert len(names) == 2
    assert set(stored_uploads()) == names


# --- a request that brings no readable file says why ----------------------------------------


def test_a_file_name_that_is_not_utf8_is_named_as_the_problem(alice_client):
    body, content_type = multipart("placeholder", SAMPLE.encode())
    body = body.replace(b"placeholder", "résumé.md".encode("latin-1"))
    before = snapshot()
    response = alice_client.generic("POST", "/api/tasks", body, content_type=content_type)
    assert_refused(response, 400, "invalid_request", "file name in UTF-8")
    assert snapshot() == before


def test_a_chunked_upload_is_named_as_the_problem(alice_client):
    body, content_type = multipart("article.md", SAMPLE.encode())
    response = alice_client.generic(
        "POST",
        "/api/tasks",
        body,
        content_type=content_type,
        CONTENT_LENGTH="",  # as a chunked request arrives: no length
        HTTP_TRANSFER_ENCODING="chunked",
    )
    assert_refused(response, 400, "invalid_request", "chunked")


def test_a_form_without_files_still_asks_for_one(alice_client):
    response = alice_client.post("/api/tasks", {"instructions": "Summarise."})
    assert_refused(response, 400, "invalid_request", "Choose at least one file")


def test_instructions_sent_as_a_file_are_refused_by_name_not_dropped(alice_client):
    """A client that sends the instructions as a file part (`-F instructions=@notes.txt`)
    is told so, where the task used to be made without them."""
    before = snapshot()
    response = submit(alice_client, instructions=upload("notes.txt", "Focus on costs."))
    assert_refused(response, 400, "invalid_request", "'instructions'", "text field")
    assert snapshot() == before
