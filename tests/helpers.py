"""Helpers the tests share: sample documents, uploads, submitting, running the worker, and
scripted providers."""

from __future__ import annotations

import datetime as dt
import io
import ipaddress
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.core.files.storage import storages
from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext

from bench.harness import free_port  # noqa: F401  (one way to pick a port, for every test)
from reports import storage, submissions, threads
from reports.models import Attempt, AttemptStatus, Document, Status, Task, TaskEvent
from reports.parsers import passages
from reports.providers.base import (
    Completed,
    Provider,
    ProviderError,
    SourceDocument,
    TextDelta,
    Usage,
)
from reports.submissions import Submission, Upload
from reports.threads import on_shared_db
from reports.worker import preparation
from reports.worker.leases import claim_next_task
from reports.worker.supervisor import Supervisor

SAMPLE = (
    "# Tidal energy in small harbours\n\n"
    "Tidal energy is a predictable source of power. Small harbours see two tides a day, "
    "and the difference between high and low water can drive a turbine. Engineers in "
    "Brittany measured the flow at twelve sites over a year.\n\n"
    "## Findings\n\n"
    "The best sites had narrow entrances that speed up the flow. Turbines placed there "
    "produced steady power for eight hours a day. Maintenance costs were lower than "
    "expected because the water is sheltered.\n"
)


# Every route about one task; each must answer another user exactly as a missing task.
TASK_ROUTES = [
    ("get", "/api/tasks/{id}"),
    ("get", "/api/tasks/{id}/events"),
    ("get", "/api/tasks/{id}/result"),
    ("post", "/api/tasks/{id}/cancel"),
    ("post", "/api/tasks/{id}/retry"),
    ("post", "/api/tasks/{id}/timing"),
    ("get", "/api/tasks/{id}/sources/S1"),
    ("post", "/api/tasks/{id}/share"),
]


def upload(name: str = "article.md", content: str | bytes = SAMPLE):
    data = content.encode() if isinstance(content, str) else content
    f = io.BytesIO(data)
    f.name = name
    return f


def submit(client: Client, *files, headers=None, **fields):
    """POST /api/tasks with the given uploads (a sample .md when none) and fields."""
    payload = {"files": list(files) or [upload()], **fields}
    return client.post("/api/tasks", payload, headers=headers or {})


def run_all(worker: Supervisor) -> None:
    """Claim and run tasks until nothing more can be claimed now."""

    async def go():
        while await worker.claim_and_start():
            await worker.wait_for_attempts()
        await worker.wait_for_attempts()

    async_to_sync(go)()


def task_of(response) -> Task:
    return Task.objects.get(pk=response.json()["task_id"])


class ScriptedProvider(Provider):
    """A provider whose stream is an async generator function the test writes."""

    name = "scripted"

    def __init__(self, script, clock) -> None:
        super().__init__(clock=clock)
        self.script = script

    def stream(self, request):
        return self.script(request, self.clock)


REPORT = "# Report\n\n## Summary\n\nIt works.\n\n## Details\n\nMore text.\n"
# A report in Japanese, its kanji drawn in Japanese shapes only where the page says so, with
# a paragraph in English.
JAPANESE_REPORT = (
    "# 港湾調査\n\n## 概要\n\n"
    "三つの港湾の水深を調査した。直角の岸壁は骨組みが古く、北の港は深い。\n\n"
    "Northgate was surveyed in 2024.\n"
)


# A list nested fourteen deep, deeper than a report is laid out
# (reports.parsers.markdown_depth), bullets and numbers in turn, a tree an item; a second
# item at the top and a paragraph after it.
TREES = (
    "Alder", "Birch", "Cedar", "Dogwood", "Elm", "Fir", "Ginkgo", "Hazel", "Ironwood",
    "Juniper", "Kapok", "Larch", "Maple", "Nutmeg",
)  # fmt: skip


def nested_list() -> str:
    lines, indent = [], ""
    for depth, tree in enumerate(TREES):
        marker = "-" if depth % 2 == 0 else "1."
        lines.append(f"{indent}{marker} {tree} tree")
        indent += " " * (len(marker) + 1)
    return "\n".join([*lines, "- Oak tree", "", "Willows grow by water.", ""])


NESTED_REPORT = f"# Trees\n\n## Summary\n\nA survey.\n\n## Findings\n\n{nested_list()}"


def assert_every_tree(text: str) -> None:
    """Each tree of `nested_list` is in the text a reader sees, in order."""
    shown = " ".join(text.split())
    at = 0
    for tree in (*TREES, "Oak"):
        found = shown.find(f"{tree} tree", at)
        assert found >= 0, f"{tree} is missing after {shown[:at][-80:]!r}"
        at = found
    assert "Willows grow by water." in shown[at:]


async def whole_report(request, clock):
    """A well-behaved stream: the report in small pieces, then the completion signal."""
    for i in range(0, len(REPORT), 8):
        yield TextDelta(REPORT[i : i + 8])
        await clock.sleep(0.05)
    yield Completed("stop", Usage(10, 20, None, "provider"), request_id="req-1")


def wait_for(condition, what: str, timeout: float = 60):
    """Poll until `condition()` is true (bounded: fail after `timeout` s), and return its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def expire_lease(task: Task) -> None:
    """Make the task's lease one that expired long ago."""
    Task.objects.filter(pk=task.pk).update(lease_expires_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))


def make_submission(owner, content: str = SAMPLE, scenario: str = "ok") -> Task:
    """Create a queued task through the real submit path."""
    submission = Submission((Upload("doc.md", ".md", content.encode()),), "", scenario, None)
    task, _ = submissions.submit(owner, submission)
    return task


async def silent(request, clock):
    """Answer nothing until past a 60 s response timeout: the outcome is unknown."""
    await clock.sleep(61)
    yield TextDelta("too late")


def local_storage(folder: Path) -> dict:
    """Return the `STORAGES` entry of local files under `folder`."""
    return {"BACKEND": "reports.storage.AtomicFileSystemStorage", "OPTIONS": {"location": folder}}


def stored_files(kind: str) -> list[str]:
    """Return the names of the stored `uploads` or `results`, whatever the store."""
    try:
        return sorted(storages["reports"].listdir(kind)[1])
    except FileNotFoundError:
        return []


def saved_report(task) -> str:
    """Return the report saved for a succeeded task, read back from the store."""
    task.refresh_from_db()
    with storage.open_result(task.result_id) as f:
        return f.read().decode()


def report_body(report: str) -> str:
    """Return a saved report without the `## Sources` section its finalization adds: the
    text the model wrote (with any citation of no passage taken out), to its last word."""
    body, sources, _ = report.rpartition("\n## Sources\n")
    assert sources, "a saved report ends with its sources"
    return body.rstrip()


def stored_uploads() -> list[str]:
    return stored_files("uploads")


def snapshot() -> tuple[int, int, list[Path]]:
    return Task.objects.count(), Document.objects.count(), stored_uploads()


def assert_refused(response, status: int, code: str, *hints: str) -> dict:
    """Assert docs/api.md's error answer, with a message that names what was wrong."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    message = body["error"]["message"]
    assert isinstance(message, str) and len(message) > 10
    for hint in hints:
        assert hint.lower() in message.lower(), message
    return body


def multipart(filename: str, data: bytes) -> tuple[bytes, str]:
    """Return a multipart body whose filename is sent exactly as given (the test client
    would strip its path), and its content type."""
    boundary = "ReportlineBoundary7f3a"
    body = (
        (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="files"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


def database_url(db: dict) -> str:
    """Return a DATABASE_URL naming the database this test runs on."""
    if db["ENGINE"] == "project.sqlite":
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def lines_of(stream: io.StringIO) -> list[dict]:
    """Parse every line the configured handler wrote; each must be one JSON object."""
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def wait_for_port(port: int, timeout: float) -> None:
    """Wait (bounded) until something accepts connections on 127.0.0.1:`port`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing answered on port {port} within {timeout} s")


def files_under(folder: Path) -> list[Path]:
    """Return every file below `folder` (none when it does not exist)."""
    return sorted(p for p in folder.rglob("*") if p.is_file())


def read_events(reply) -> Iterator[tuple[int, str, dict]]:
    """Yield (seq, type, data) of each event of a text/event-stream response as it arrives."""
    fields: dict[str, str] = {}
    for raw in iter(reply.readline, b""):
        line = raw.decode().rstrip("\n")
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
            continue
        if "id" in fields:
            yield int(fields["id"]), fields["event"], json.loads(fields["data"])
        fields = {}


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """Write a fresh self-signed certificate for 127.0.0.1; return its certificate and key files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


async def items_or_error(provider: Provider, request) -> tuple[list, ProviderError | None]:
    """Return what the provider's stream yielded, and the error it ended with, if any."""
    items = []
    try:
        async for item in provider.stream(request):
            items.append(item)
    except ProviderError as exc:
        return items, exc
    return items, None


def tasks_of_every_kind(owner, count: int) -> list[Task]:
    """Create `count` tasks of the owner, in turn queued, running with text and
    succeeded, written straight to the tables (no uploads, no budget): for counting the
    queries a listing makes."""
    tasks = []
    for i in range(count):
        kind = i % 3
        task = Task.objects.create(owner=owner, content_sha256=f"{i:064x}", lane="short")
        if kind == 1:
            Task.objects.filter(pk=task.pk).update(
                status=Status.RUNNING, attempt_count=1, epoch=1, last_seq=3
            )
            Attempt.objects.create(task=task, number=1, epoch=1)
            TaskEvent.objects.create(
                task=task, seq=1, type="status", data={"status": Status.RUNNING, "attempt": 1}
            )
            TaskEvent.objects.bulk_create(
                TaskEvent(task=task, seq=seq, type="delta", data={"text": "ab", "attempt": 1})
                for seq in (2, 3)
            )
        elif kind == 2:
            Task.objects.filter(pk=task.pk).update(
                status=Status.SUCCEEDED, attempt_count=1, last_seq=1
            )
            TaskEvent.objects.create(
                task=task, seq=1, type="succeeded", data={"result_id": "r", "attempt": 1}
            )
            Attempt.objects.create(
                task=task,
                number=1,
                epoch=1,
                status=AttemptStatus.SUCCEEDED,
                text="# Done",
                ended_at=task.created_at,
            )
        Document.objects.create(
            task=task,
            position=0,
            name=f"doc-{i}.md",
            extension=".md",
            storage_name=f"stored-{task.pk}",
            size=1,
            sha256="0" * 64,
        )
        tasks.append(task)
    return tasks


@asynccontextmanager
async def queries_of_the_streams():
    """Capture the queries the pages and event streams run. Their reads take the shared
    database thread meanwhile, where they are captured: what is counted is the queries,
    whichever thread runs them (`threads.on_page_reads` has several)."""
    page_reads, threads.on_page_reads = threads.on_page_reads, threads.on_shared_db
    captured = await on_shared_db(lambda: CaptureQueriesContext(connections["default"]))()
    await on_shared_db(captured.__enter__)()
    try:
        yield captured
    finally:
        await on_shared_db(captured.__exit__)(None, None, None)
        threads.on_page_reads = page_reads


def store_passages(task: Task, text: str = SAMPLE, max_chars: int = 200) -> list:
    """Cut `text` into passages and store them as the task's, as the parse stage does."""
    return preparation.store_passages(
        task.pk, passages.cut([SourceDocument("doc.md", text)], max_chars)
    )


def claim_concurrently(claimers: int, **options) -> list:
    """Return what `claimers` threads, each on its own connection, claimed at once."""
    barrier = threading.Barrier(claimers)
    claims, errors = [], []

    def claim(n: int) -> None:
        try:
            barrier.wait()
            found = claim_next_task(f"worker-{n}", **options)
            if found is not None:
                claims.append(found)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(claimers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return claims


def form_cut_short(field: str, value: str) -> tuple[str, str]:
    """Return a multipart form, and its content type, whose `field` comes after a 2 MB
    file part: under a 1 MB file limit, the upload limit stops reading before the field."""
    boundary = "ReportlineBoundary7f3a"
    body = (
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="extra"; filename="big.txt"\r\n\r\n'
        + "x"
        * (2 * 1024 * 1024)
        + f"\r\n--{boundary}\r\n"
        f'Content-Disposition: form-data; name="{field}"\r\n\r\n'
        f"{value}\r\n--{boundary}--\r\n"
    )
    return body, f"multipart/form-data; boundary={boundary}"
