"""REPORTS_STORAGE=s3: uploads and results in an S3-compatible store (moto's server), none
on this process's disk; a store that cannot be reached fails a save, never a success."""

from __future__ import annotations

import sys

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.files.storage import storages

from project.settings import reports_storage
from reports import storage
from reports.models import Attempt, Task
from reports.providers.base import Completed
from tests.helpers import (
    REPORT,
    assert_refused,
    files_under,
    free_port,
    report_body,
    run_all,
    saved_report,
    stored_files,
    submit,
    task_of,
    whole_report,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def unreachable_store(object_store, settings, monkeypatch):
    """Return a switch that points this process at a port where no store answers."""

    def switch() -> None:
        monkeypatch.setenv("AWS_S3_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
        settings.STORAGES = {**settings.STORAGES, "reports": reports_storage()}

    return switch


def test_a_report_is_written_to_and_downloaded_from_the_store(
    object_store, alice_client, scripted_worker
):
    task = task_of(submit(alice_client))
    run_all(scripted_worker(whole_report))
    task.refresh_from_db()
    assert task.status == "succeeded"

    reply = alice_client.get(f"/api/tasks/{task.pk}/result")
    assert reply.status_code == 200
    downloaded = reply.content.decode()
    assert downloaded == saved_report(task) and report_body(downloaded) == REPORT.rstrip()
    assert stored_files("uploads") == [task.documents.get().storage_name]
    assert stored_files("results") == [f"{task.result_id}.md"]
    assert files_under(settings.REPORTS_STORAGE_DIR) == []  # nothing on this disk


def test_a_store_unreachable_during_the_save_fails_the_task_keeping_its_text(
    object_store, unreachable_store, alice_client, scripted_worker
):
    task = task_of(submit(alice_client))

    async def store_goes_down(request, clock):
        async for item in whole_report(request, clock):
            if isinstance(item, Completed):
                unreachable_store()  # after the text, before the save
            yield item

    run_all(scripted_worker(store_goes_down))
    task.refresh_from_db()
    assert (task.status, task.error_type, task.result_id) == ("failed", "save_failed", None)
    assert Attempt.objects.get(task=task).text == REPORT  # kept, shown as incomplete


def test_a_download_while_the_store_is_unreachable_is_a_503_not_a_500(
    object_store, unreachable_store, alice_client, scripted_worker
):
    task = task_of(submit(alice_client))
    run_all(scripted_worker(whole_report))
    unreachable_store()

    reply = alice_client.get(f"/api/tasks/{task.pk}/result")
    assert_refused(reply, 503, "storage_unavailable", "report store", "try again in 5 s")
    assert reply["Retry-After"] == "5"  # when to ask again, as for the database


def test_every_failure_of_the_store_is_an_os_error(object_store, unreachable_store):
    with pytest.raises(FileNotFoundError):
        storages["reports"].open("uploads/missing")
    unreachable_store()
    with pytest.raises(OSError):
        storage.save_upload(b"text")


def test_an_upload_while_the_store_is_unreachable_is_a_503_and_makes_no_task(
    object_store, unreachable_store, alice_client
):
    unreachable_store()
    reply = submit(alice_client)
    assert_refused(reply, 503, "storage_unavailable", "file store", "try again in 5 s")
    assert reply["Retry-After"] == "5"
    assert not Task.objects.exists()


def test_a_retry_while_the_store_is_unreachable_is_a_503_and_makes_no_task(
    object_store, unreachable_store, alice_client, scripted_worker
):
    task = task_of(submit(alice_client))
    run_all(scripted_worker(whole_report))
    task.refresh_from_db()
    assert task.status == "succeeded"  # "Write a fresh one" reads its documents again
    unreachable_store()

    reply = alice_client.post(f"/api/tasks/{task.pk}/retry")
    assert_refused(reply, 503, "storage_unavailable", "file store")
    assert reply["Retry-After"] == "5"
    page = alice_client.post(f"/tasks/{task.pk}/retry/")
    assert page.status_code == 503
    assert b"The file store cannot be reached" in page.content
    assert Task.objects.count() == 1


@pytest.mark.parametrize("missing", ["storages", "botocore"])
def test_without_the_s3_extra_the_settings_name_what_to_install(monkeypatch, missing):
    monkeypatch.setenv("REPORTS_STORAGE", "s3")
    monkeypatch.setenv("AWS_STORAGE_BUCKET_NAME", "reports")
    monkeypatch.setitem(sys.modules, missing, None)  # as if it were not installed
    for name in [n for n in sys.modules if n.startswith(f"{missing}.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ImproperlyConfigured, match=r"pip install 'reportline\[s3\]'"):
        reports_storage()
