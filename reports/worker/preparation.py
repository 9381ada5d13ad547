"""The parse stage: a task's documents as text, and their passages.

The parse is three steps on two threads (reports/threads.py): a short read of what the task
holds, the slow parse of each new document away from the database, and a short write of
its text.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction

from reports import storage, threads
from reports.models import CompiledRead, Document, PreparedText, SourcePassage
from reports.parsers import PARSER_VERSION, parser_for, sandbox
from reports.parsers.base import Extracted, ParseError
from reports.parsers.passages import Passage


@dataclass(frozen=True)
class DocumentToRead:
    """A document of a task, with its text when this owner already had it parsed."""

    owner_id: int
    name: str
    sha256: str
    storage_name: str
    extracted: Extracted | None


def documents_to_read(task_id, owner_id: int) -> list[DocumentToRead]:
    """Return the task's documents in order, each with its prepared text when there is one.

    A short read on the shared database thread: the parse of what is missing happens
    elsewhere (`read_document`), its text is stored after (`store_prepared_text`).
    """
    documents = _DOCUMENTS.rows(task_id)
    hashes = tuple(dict.fromkeys(sha256 for _, sha256, _ in documents))
    prepared = {
        sha256: Extracted(text, tuple(ocr_pages))
        for sha256, text, ocr_pages in (_PREPARED.rows(owner_id, hashes) if hashes else ())
    }
    return [
        DocumentToRead(owner_id, name, sha256, storage_name, prepared.get(sha256))
        for name, sha256, storage_name in documents
    ]


# Every attempt reads them before its call: compiled once (reports.models.compiled).
_DOCUMENTS = CompiledRead(
    lambda task_id: (
        Document.objects.filter(task_id=task_id)
        .order_by("position")
        .values_list("name", "sha256", "storage_name")
    ),
    lambda task_id: [(Document._meta.get_field("task"), task_id)],
)
_PREPARED = CompiledRead(
    lambda owner_id, hashes: PreparedText.objects.filter(
        owner_id=owner_id, sha256__in=hashes, parser_version=PARSER_VERSION
    ).values_list("sha256", "text", "ocr_pages"),
    lambda owner_id, hashes: [
        (PreparedText._meta.get_field("owner"), owner_id),  # the ORM's order: by name
        (PreparedText._meta.get_field("parser_version"), PARSER_VERSION),
        *((PreparedText._meta.get_field("sha256"), sha256) for sha256 in hashes),
    ],
    shape=lambda owner_id, hashes: len(hashes),
)


def read_document(
    document: DocumentToRead,
    stop: sandbox.Stop | None = None,
    told: Callable[[str], None] | None = None,
) -> Extracted:
    """Return the document's text, read from its file by its sandboxed parser.

    Slow (seconds for a hard PDF, a second or two a page read by OCR): it runs in the
    blocking pool and touches no database. `stop` ends the parse at once from another
    thread (sandbox.Stopped is raised); `told` hears, on another thread, what a slow parse
    says it is reading ("Reading page 3 of 50 by OCR").
    """
    parser = parser_for(document.name)
    if parser is None:
        raise ParseError(f"{document.name}: this kind of file is not supported.")
    try:
        with sandbox.stopped_by(stop), sandbox.told_to(told):
            extracted = parser.read(storage.read_upload(document.storage_name))
    except ParseError as exc:
        raise ParseError(f"{document.name}: {exc}") from None
    if not extracted.text.strip():
        raise ParseError(f"{document.name}: no text could be extracted from it.")
    return extracted


@dataclass
class _Parse:
    """One parse under way in this process, the attempts that wait for it (each with what
    it is told of the parse's progress), and the parse's latest word on it."""

    stop: sandbox.Stop
    future: asyncio.Future = field(init=False)
    listeners: list[Callable[[str], None]] = field(default_factory=list)
    said: str = ""

    def tell(self, label: str) -> None:
        self.said = label
        for listener in list(self.listeners):
            listener(label)


_reading: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> key -> _Parse


async def read_once(
    document: DocumentToRead, told: Callable[[str], None] | None = None
) -> Extracted:
    """Return the document's text: parsed in the blocking pool and kept for its owner,
    once for all of this process's attempts that ask for the same owner's file meanwhile.

    A burst of tasks on one file (a user trying several instructions) makes one parse,
    not one child process each. The parse goes on while any attempt waits for it; when the
    last one stops waiting (cancelled, or its lease lost) its child is killed at once.
    `told` hears, on the event loop, what the parse says it is reading (at once the latest
    word when the parse had said something already).
    """
    loop = asyncio.get_running_loop()
    reading = _reading.setdefault(loop, {})
    key = (document.owner_id, document.sha256)
    parse = reading.get(key)
    if parse is None:
        parse = reading[key] = _Parse(sandbox.Stop())
        parse.future = asyncio.ensure_future(_read_and_keep(document, parse, loop))
        parse.future.add_done_callback(lambda _, parse=parse: _forget(reading, key, parse))
    listener = told or _ignore
    parse.listeners.append(listener)
    if parse.said:
        listener(parse.said)
    try:
        return await asyncio.shield(parse.future)
    finally:
        parse.listeners.remove(listener)
        if not parse.listeners and not parse.future.done():
            _forget(reading, key, parse)  # an attempt that comes later starts afresh
            parse.stop.stop()
            parse.future.add_done_callback(_drop_outcome)


def _forget(reading: dict, key, parse: _Parse) -> None:
    if reading.get(key) is parse:
        del reading[key]


def _drop_outcome(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()  # nobody awaits it: Stopped, most likely, is not worth a log


def _ignore(label: str) -> None:
    pass


async def _read_and_keep(
    document: DocumentToRead, parse: _Parse, loop: asyncio.AbstractEventLoop
) -> Extracted:
    def told(label: str) -> None:  # on the parse's listening thread
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody listens
            loop.call_soon_threadsafe(parse.tell, label)

    extracted = await threads.in_blocking_pool(read_document)(document, parse.stop, told)
    await threads.on_shared_db(store_prepared_text)(document, extracted)
    return extracted


async def until_stopped[R](work: Awaitable[R], stopped: asyncio.Event) -> tuple[bool, R | None]:
    """Await `work` unless `stopped` is set first; then cancel it (a parse it waits for is
    killed when no other attempt waits for it). Return (finished, its result)."""
    doing = asyncio.ensure_future(work)
    waiting = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait((doing, waiting), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
        if not doing.done():
            doing.cancel()
        await asyncio.gather(doing, waiting, return_exceptions=True)
    if doing.cancelled():
        return False, None
    return True, doing.result()


def store_prepared_text(document: DocumentToRead, extracted: Extracted) -> None:
    """Keep a parsed text, so its owner's next task with the same file skips the parse."""
    try:
        with transaction.atomic():
            PreparedText.objects.create(
                owner_id=document.owner_id,
                sha256=document.sha256,
                parser_version=PARSER_VERSION,
                text=extracted.text,
                ocr_pages=list(extracted.ocr_pages),
            )
    except IntegrityError:
        pass  # another attempt prepared the same file at the same moment


# Rows a statement inserts at most: one statement for a whole 10 MB document would be
# tens of megabytes.
STORE_BATCH = 500


def stored_passages(task_id) -> list[Passage]:
    return [
        Passage(number, document, section or None, page, text)
        for number, document, section, page, text in _PASSAGES.rows(task_id)
    ]


_PASSAGES = CompiledRead(
    lambda task_id: (
        SourcePassage.objects.filter(task_id=task_id)
        .order_by("number")
        .values_list("number", "document", "section", "page", "text")
    ),
    lambda task_id: [(SourcePassage._meta.get_field("task"), task_id)],
)


def store_passages(task_id, passages: list[Passage]) -> list[Passage]:
    """Store a task's passages in one transaction and return them; when another attempt
    stored them first, return those."""
    rows = [
        SourcePassage(
            task_id=task_id,
            number=p.number,
            document=p.document,
            section=p.section or "",
            page=p.page,
            text=p.text,
        )
        for p in passages
    ]
    try:
        with transaction.atomic():
            SourcePassage.objects.bulk_create(rows, batch_size=STORE_BATCH)
    except IntegrityError:
        return stored_passages(task_id)
    return passages
