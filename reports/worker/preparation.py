"""The parse and prepare stages: a task's documents as text, and the provider request."""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction

from reports import storage
from reports.models import Attempt, AttemptStatus, Document, PreparedText, Task
from reports.parsers import PARSER_VERSION, parser_for
from reports.parsers.base import ParseError
from reports.providers.base import GenerationRequest, SourceDocument
from reports.providers.prompts import PROMPT_VERSION, fit_to_context
from reports.worker.leases import Claim


def load_documents(task_id) -> list[SourceDocument]:
    """Return the task's documents as text, parsing each file at most once per owner."""
    task = Task.objects.only("owner_id").get(pk=task_id)
    documents = []
    for doc in Document.objects.filter(task_id=task_id).order_by("position"):
        cached = PreparedText.objects.filter(
            owner_id=task.owner_id, sha256=doc.sha256, parser_version=PARSER_VERSION
        ).first()
        if cached is not None:
            text = cached.text
        else:
            parser = parser_for(doc.name)
            if parser is None:
                raise ParseError(f"{doc.name}: this kind of file is not supported.")
            try:
                text = parser.extract(storage.read_upload(doc.storage_name))
            except ParseError as exc:
                raise ParseError(f"{doc.name}: {exc}") from None
            if not text.strip():
                raise ParseError(f"{doc.name}: no text could be extracted from it.")
            try:
                with transaction.atomic():
                    PreparedText.objects.create(
                        owner_id=task.owner_id,
                        sha256=doc.sha256,
                        parser_version=PARSER_VERSION,
                        text=text,
                    )
            except IntegrityError:
                pass  # another attempt prepared the same file at the same moment
        documents.append(SourceDocument(doc.name, text))
    return documents


def build_request(claim: Claim, documents: list[SourceDocument]) -> GenerationRequest:
    """Return the provider request, its documents cut to the model's context budget.

    The attempt records the prompt version it is written with before the provider is
    called, so even an attempt whose outcome is unknown says which prompt it sent.
    """
    task = Task.objects.only("instructions", "scenario").get(pk=claim.task_id)
    fitted = fit_to_context(
        documents,
        task.instructions,
        context_tokens=settings.REPORTS_CONTEXT_TOKENS,
        max_output_tokens=settings.REPORTS_MAX_OUTPUT_TOKENS,
    )
    Attempt.objects.filter(pk=claim.attempt_id, status=AttemptStatus.RUNNING).update(
        prompt_version=PROMPT_VERSION
    )
    return GenerationRequest(
        task_id=str(claim.task_id),
        attempt_number=claim.number,
        documents=fitted,
        instructions=task.instructions,
        scenario=task.scenario,
        max_output_tokens=settings.REPORTS_MAX_OUTPUT_TOKENS,
    )
