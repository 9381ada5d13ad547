"""Attempts of one process that need the same owner's file at the same moment wait for
one parse of it (one sandboxed child), not one each."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import pytest

from reports.worker import preparation
from reports.worker.preparation import DocumentToRead

DOCUMENT = DocumentToRead(
    owner_id=1, name="notes.md", sha256="ab" * 32, storage_name="uploads/x", extracted=None
)


async def test_attempts_reading_one_file_at_once_make_one_parse(monkeypatch):
    parsed, kept, release = [], [], threading.Event()

    def read_document(document, stop=None, told=None):
        parsed.append(document.name)
        assert release.wait(10)
        return "The text."

    monkeypatch.setattr(preparation, "read_document", read_document)
    monkeypatch.setattr(preparation, "store_prepared_text", lambda _, text: kept.append(text))
    first = asyncio.create_task(preparation.read_once(DOCUMENT))
    second = asyncio.create_task(preparation.read_once(replace(DOCUMENT, name="again.md")))
    other_owner = asyncio.create_task(preparation.read_once(replace(DOCUMENT, owner_id=2)))
    await asyncio.sleep(0)  # all three have asked
    first.cancel()  # the attempt that started the parse is cancelled: the parse goes on
    release.set()

    assert await second == "The text."
    assert await other_owner == "The text."
    assert first.cancelled()
    assert parsed == ["notes.md", "notes.md"]  # one parse per owner
    assert kept == ["The text.", "The text."]


async def test_a_file_that_cannot_be_read_fails_every_attempt_waiting_for_it(monkeypatch):
    parsed = []

    def read_document(document, stop=None, told=None):
        parsed.append(document.name)
        raise preparation.ParseError("notes.md: no text could be extracted from it.")

    monkeypatch.setattr(preparation, "read_document", read_document)
    waiting = [asyncio.create_task(preparation.read_once(DOCUMENT)) for _ in range(2)]
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert [str(r) for r in results] == ["notes.md: no text could be extracted from it."] * 2
    assert parsed == ["notes.md"]
    # The failure is not kept: a later attempt reads the file again.
    with pytest.raises(preparation.ParseError):
        await preparation.read_once(DOCUMENT)
    assert parsed == ["notes.md", "notes.md"]


async def test_a_parse_nobody_waits_for_any_more_is_stopped(monkeypatch):
    stops, started, release = [], threading.Event(), threading.Event()

    def read_document(document, stop=None, told=None):
        stops.append(stop)
        started.set()
        assert release.wait(10)
        return "The text."

    monkeypatch.setattr(preparation, "read_document", read_document)
    monkeypatch.setattr(preparation, "store_prepared_text", lambda _, text: None)
    waiting = asyncio.create_task(preparation.read_once(DOCUMENT))
    assert await asyncio.to_thread(started.wait, 10)
    waiting.cancel()  # the one attempt that waited is cancelled: its child must go
    await asyncio.gather(waiting, return_exceptions=True)

    assert stops[0] is not None and stops[0].stopped
    release.set()
    # An attempt that asks afterwards starts a parse of its own.
    assert await preparation.read_once(DOCUMENT) == "The text."
    assert len(stops) == 2 and not stops[1].stopped
