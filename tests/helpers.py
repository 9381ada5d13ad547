"""Helpers the tests share: sample documents, uploads, submitting, running the worker, and
scripted providers."""

from __future__ import annotations

import io
from pathlib import Path

from asgiref.sync import async_to_sync
from django.conf import settings as django_settings
from django.test import Client

from reports import submissions
from reports.models import Document, Task
from reports.providers.base import Completed, Provider, TextDelta, Usage
from reports.submissions import Submission, Upload
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
            await worker.drain()
        await worker.drain()

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


async def whole_report(request, clock):
    """A well-behaved stream: the report in small pieces, then the completion signal."""
    for i in range(0, len(REPORT), 8):
        yield TextDelta(REPORT[i : i + 8])
        await clock.sleep(0.05)
    yield Completed("stop", Usage(10, 20, None, "provider"), request_id="req-1")


def make_submission(owner, content: str = SAMPLE, scenario: str = "ok") -> Task:
    """Create a queued task through the real submit path."""
    submission = Submission((Upload("doc.md", ".md", content.encode()),), "", scenario, None)
    task, _ = submissions.submit(owner, submission)
    return task


async def silent(request, clock):
    """Answer nothing until past a 60 s response timeout: the outcome is unknown."""
    await clock.sleep(61)
    yield TextDelta("too late")


def stored_uploads() -> list[Path]:
    folder = Path(django_settings.REPORTS_STORAGE_DIR) / "uploads"
    return sorted(folder.iterdir()) if folder.exists() else []


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
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
