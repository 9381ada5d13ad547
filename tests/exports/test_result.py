"""The saved report downloaded in each format: GET /api/tasks/<id>/result?format=…"""

from __future__ import annotations

import io
import logging
import re
import threading

import docx
import pypdfium2
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import storages

from reports import exports
from reports.models import Status
from reports.parsers import sandbox
from tests.helpers import run_all, submit, task_of

pytestmark = pytest.mark.django_db

WORD = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


@pytest.fixture
def task(alice_client, worker):
    task = task_of(submit(alice_client))
    run_all(worker)
    task.refresh_from_db()
    assert task.status == Status.SUCCEEDED
    return task


def download(client, task, fmt: str):
    return client.get(f"/api/tasks/{task.pk}/result?format={fmt}")


def content(response) -> bytes:
    return response.content


@pytest.mark.parametrize(
    ("fmt", "content_type", "opening"),
    [
        ("html", "text/html; charset=utf-8", b"<!DOCTYPE html>"),
        ("pdf", "application/pdf", b"%PDF-"),
        ("docx", WORD, b"PK"),
    ],
)
def test_each_format_downloads_as_an_attachment_named_after_the_document(
    alice_client, task, fmt, content_type, opening
):
    response = download(alice_client, task, fmt)

    assert response.status_code == 200
    assert response["Content-Type"] == content_type
    assert response["Content-Disposition"] == f'attachment; filename="article-report.{fmt}"'
    assert content(response).startswith(opening)


def test_the_html_page_stands_alone_with_its_citations_and_sources(alice_client, task):
    page = content(download(alice_client, task, "html")).decode()

    assert "<style>" in page and "<script" not in page.lower()
    assert "<h2>Sources</h2>" in page
    # A citation leads to its entry in the Sources section, inside the file.
    assert 'data-citation="S1"' in page and 'href="#source-S1"' in page
    assert '<li id="source-S1">' in page
    assert 'href="sources/' not in page


def test_another_format_is_refused(alice_client, task):
    response = download(alice_client, task, "exe")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_another_users_task_is_not_found_in_any_format(bob_client, task):
    response = download(bob_client, task, "pdf")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_a_failed_conversion_answers_json_and_the_markdown_still_downloads(
    alice_client, task, monkeypatch, caplog
):
    monkeypatch.setattr(exports, "LIMITS", sandbox.Limits(cpu_s=30, memory_mb=1024, wall_s=0.01))

    with caplog.at_level(logging.WARNING, logger="reports.api"):
        failed = download(alice_client, task, "pdf")

    assert failed.status_code == 500
    assert failed.json()["error"]["code"] == "conversion_failed"
    assert str(task.pk) in caplog.text
    assert download(alice_client, task, "md").status_code == 200


def test_a_second_download_is_served_from_the_kept_conversion(alice_client, task, monkeypatch):
    first = content(download(alice_client, task, "docx"))

    def no_conversion(*args):
        raise AssertionError("converted again")

    monkeypatch.setattr(sandbox, "run", no_conversion)
    again = download(alice_client, task, "docx")

    assert again.status_code == 200 and content(again) == first


def test_a_conversion_kept_by_earlier_converters_is_made_again(alice_client, task):
    # Kept under the name of the converters before the version: lists nested past ten
    # levels without their words, Japanese in Chinese shapes.
    storages["reports"].save(f"exports/{task.result_sha256}.pdf", ContentFile(b"%PDF-old"))

    again = content(download(alice_client, task, "pdf"))

    assert again.startswith(b"%PDF-") and again != b"%PDF-old"


def test_conversions_past_the_few_at_once_answer_503_with_retry_after(
    alice_client, task, monkeypatch
):
    monkeypatch.setattr(exports, "_slots", threading.BoundedSemaphore(1))
    monkeypatch.setattr(exports, "WAIT_FOR_SLOT_S", 0)
    exports._slots.acquire()  # another conversion is running

    busy = download(alice_client, task, "pdf")

    assert busy.status_code == 503 and busy["Retry-After"] == str(exports.RETRY_AFTER_S)
    assert busy.json()["error"]["code"] == "conversion_failed"
    message = busy.json()["error"]["message"]
    assert "Too many reports" in message and f"in {exports.RETRY_AFTER_S} s" in message


def test_one_users_burst_of_conversions_leaves_the_other_slots_to_others(
    alice_client, bob_client, task, worker, monkeypatch
):
    """Alice's second conversion waits for her first, not for a free slot: with a slot
    still free, it answers 503 once the wait is over, and bob's conversion takes the slot."""
    bobs = task_of(submit(bob_client))
    run_all(worker)
    monkeypatch.setattr(exports, "WAIT_FOR_SLOT_S", 0.2)
    real_run, started, release = sandbox.run, threading.Event(), threading.Event()

    def first_runs_until_released(*args):
        if not started.is_set():
            started.set()
            release.wait(30)
        return real_run(*args)

    monkeypatch.setattr(sandbox, "run", first_runs_until_released)
    running = threading.Thread(target=exports.exported, args=(task, "pdf"))
    running.start()  # alice's first conversion, in another request
    try:
        assert started.wait(30)

        alices_second = download(alice_client, task, "docx")
        bobs_first = download(bob_client, bobs, "docx")
    finally:
        release.set()
        running.join(30)

    assert alices_second.status_code == 503 and alices_second["Retry-After"]
    assert alices_second.json()["error"]["code"] == "conversion_failed"
    # Her own turn, not a busy server: she is told so, and when to ask again.
    message = alices_second.json()["error"]["message"]
    assert "Your other downloads are being converted, one at a time" in message
    assert f"in {alices_second['Retry-After']} s" in message
    assert bobs_first.status_code == 200
    assert download(alice_client, task, "html").status_code == 200  # her turn is back


def test_the_task_page_offers_every_format(alice_client, task):
    page = alice_client.get(f"/tasks/{task.pk}/").content.decode()

    for fmt in ("md", "html", "pdf", "docx"):
        assert f'data-download data-format="{fmt}"' in page
    for fmt in ("html", "pdf", "docx"):
        assert f'href="/api/tasks/{task.pk}/result?format={fmt}&amp;passages=1"' in page


def test_with_passages_each_cited_passage_is_quoted_after_the_sources(alice_client, task):
    saved = content(download(alice_client, task, "md")).decode()
    cited = [int(n) for n in re.findall(r"^- S(\d+) — ", saved, re.M)]
    passages = {p.number: p for p in task.passages.filter(number__in=cited)}
    assert cited and len(passages) == len(cited)

    markdown = content(alice_client.get(f"/api/tasks/{task.pk}/result?passages=1")).decode()

    # The report as saved, then each passage it cites, under its id, in passage order.
    assert markdown.startswith(saved.rstrip() + "\n\n## Passages cited\n\n### S")
    quoted = markdown.split("\n## Passages cited\n", 1)[1]
    assert re.findall(r"^### S(\d+) — ", quoted, re.M) == [str(n) for n in sorted(cited)]
    first = passages[cited[0]]
    said = next(line for line in first.text.splitlines() if line.strip() and line[0].isalpha())
    assert f"> {said}" in quoted
    # Without the option, the saved Markdown byte for byte, as ever.
    assert content(download(alice_client, task, "md")).decode() == saved


@pytest.mark.parametrize("fmt", ["html", "pdf", "docx"])
def test_with_passages_each_format_holds_the_passages_text(alice_client, task, fmt):
    first = task.passages.order_by("number").filter(
        number__in=[int(n) for n in re.findall(r'data-citation="S(\d+)"', task.report_html)]
    )[0]
    sentence = next(s for s in re.split(r"(?<=\.) ", first.text) if len(s) > 40 and "#" not in s)
    response = alice_client.get(f"/api/tasks/{task.pk}/result?format={fmt}&passages=1")
    assert response.status_code == 200
    data = content(response)
    if fmt == "html":
        text = data.decode()
    elif fmt == "pdf":
        pdf = pypdfium2.PdfDocument(data)
        text = " ".join(pdf[i].get_textpage().get_text_range() for i in range(len(pdf)))
    else:
        text = "\n".join(p.text for p in docx.Document(io.BytesIO(data)).paragraphs)
    flat = " ".join(text.split())
    assert "Passages cited" in flat and " ".join(sentence.split()) in flat
    plain = content(download(alice_client, task, fmt))
    assert b"Passages cited" not in plain  # the kept conversion of the report alone


@pytest.mark.parametrize("value", ["yes", "2", ""])
def test_passages_is_0_or_1(alice_client, task, value):
    response = alice_client.get(f"/api/tasks/{task.pk}/result?format=pdf&passages={value}")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
