"""The words a user reads about a task: why it failed, a cancel, an unknown outcome, its
place in line.

Base layer: the worker's end of an attempt stores a user's message from here, and the
pages show the same words, so a failure reads alike wherever it is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.utils.timezone import localtime

from reports.states import PROVIDER_FAILURES, ErrorType

# Why a task ended without a report, in plain words: (short, for the status line; long).
FAILURES = {
    ErrorType.PROVIDER_ERROR: (
        "the provider dropped the connection",
        "The provider dropped the connection before the report was finished.",
    ),
    ErrorType.PROVIDER_AUTH: (
        "the provider refused our credentials",
        "The provider refused our credentials, so no report could be written.",
    ),
    ErrorType.PROVIDER_REJECTED: (
        "the provider refused the request",
        "The provider refused the request.",
    ),
    ErrorType.PROVIDER_QUOTA: (
        "the provider's spending limit was reached",
        "The provider's spending limit was reached.",
    ),
    ErrorType.RATE_LIMITED: (
        "the provider kept asking us to wait",
        "The provider kept asking us to wait, for longer than the retries allow.",
    ),
    ErrorType.STREAM_TRUNCATED: (
        "the stream ended early",
        "The stream ended early: the provider stopped before the report was complete.",
    ),
    ErrorType.EMPTY_OUTPUT: ("no text", "The provider finished without writing any text."),
    ErrorType.STALLED: (ErrorType.STALLED, "The provider stalled: no text arrived for too long."),
    ErrorType.TIMEOUT: ("timed out", "The report timed out: it ran past the task's time limit."),
    ErrorType.VALIDATION_FAILED: (
        "did not pass the checks",
        "The report was written in full but did not have the shape of a report (a title, "
        "a summary and at least one more section with words in it), so it was not saved.",
    ),
    ErrorType.SAVE_FAILED: ("could not be saved", "The report could not be saved."),
    ErrorType.INVALID_INPUT: ("the document could not be read", "The document could not be read."),
    ErrorType.BUDGET_EXHAUSTED: (
        "budget exhausted",
        "Your remaining budget cannot cover this report.",
    ),
    ErrorType.WORKER_LOST: (
        "the worker stopped responding",
        "The worker writing the report stopped responding, and no attempts were left.",
    ),
    ErrorType.WORKER_ERROR: (
        "an internal error",
        "Something went wrong on our side; the report stopped.",
    ),
    ErrorType.DEGENERATE_OUTPUT: (
        "the model kept repeating itself",
        "The model kept repeating itself with nothing new, so it was stopped before the "
        "report was finished.",
    ),
}


# A provider's stream that ends for a reason other than "stop", by the reason it names. The
# reason is the provider's own word and may be any text, so it is never shown: a reason not
# listed here reads as the last sentence.
STOPPED_EARLY = {
    "length": "The provider stopped at its output limit, before the report was complete.",
    "content_filter": "The provider's content filter stopped the report before it was complete.",
}


def stopped_early(finish_reason: str) -> str:
    """Say why a provider's stream ended early, in our words whatever it sent."""
    return STOPPED_EARLY.get(
        finish_reason, "The provider stopped before the report was complete, for its own reasons."
    )


def user_message(error_type: str, message: str, *, plain: bool = False) -> str:
    """Return the message a user is shown for a failure of this type: a provider's own
    words (`plain` false) are replaced by a plain sentence."""
    if error_type in PROVIDER_FAILURES and not plain:
        return FAILURES[error_type][1]
    return message


CANCELLED = "Cancelled by you."
UNKNOWN_OUTCOME = (
    "Outcome unknown — needs an admin. The provider may or may not have finished the "
    "request; an admin will check with the provider and resolve this task."
)


def provider_unavailable(next_try_at: datetime | None) -> str:
    """Say why a queued task waits while the provider's circuit is open (docs/providers.md),
    and when the provider is tried next; None: a probe is trying it now."""
    if next_try_at is None:
        return "The provider is unavailable; trying it again now"
    return f"The provider is unavailable; next try at {localtime(next_try_at):%H:%M:%S}"


def restarted(*, embedded: bool, notes_kept: bool = False) -> str:
    """A report whose server (or worker) stopped mid-way is written again from nothing:
    the page says so, not only that it is "trying again". A plan of calls keeps the notes
    its finished calls wrote (docs/lifecycle.md): only the rest is read again."""
    who = "the server restarted" if embedded else "the worker writing it stopped"
    if notes_kept:
        return f"{who}; the notes on the parts already read are kept, and the rest is read now"
    return f"{who}; the report is being written again from the start"


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def behind_others(running: int, cap: int) -> str:
    """Say why a queued task lets other people's reports start before it: its owner has
    `running` reports running, at least REPORTS_USER_MAX_RUNNING (`cap`), while theirs wait."""
    if running > cap:
        return (
            f"you have {running} reports running and other people's are waiting: theirs start first"
        )
    yours = "your running report" if running == 1 else f"one of your {running} running reports"
    return f"waiting for {yours} to finish, as other people's reports are waiting too"


def place_in_line(position: int) -> str:
    """Return a queued task's place in its lane's line: "next in line", "2nd in line"…"""
    return "next in line" if position == 1 else f"{ordinal(position)} in line"


# What an attempt's text says it is when it ends before its report's call: the notes of a
# plan of calls so far, each under what it read.
NOTES_SO_FAR = "Notes on the parts read so far (the report itself was not written):"
# What the task page says of such an attempt's text, where it says what became of the text.
NOTES_BELOW = "The report itself was not written; below are the notes on the parts it read."


def citations_settled(*, cites: bool, removed: int) -> str:
    """Say what became of a report's citations when they cannot all be followed: it cites
    no passage, or the model cited `removed` ids the documents do not have, taken out
    (reports/validation.py); "" when every citation it wrote names a passage."""
    ids = "1 passage" if removed == 1 else f"{removed} passages"
    if not cites:
        said = "The report cites no passage of the documents, so its statements cannot be "
        said += "traced to them here."
        if removed:
            said += f" The model cited {ids} the documents do not have; those were taken out."
        return said
    if removed:
        return (
            f"The model also cited {ids} the documents do not have; those citations were "
            "taken out, so the statements they followed cite no passage."
        )
    return ""


# A `progress` event's label when a plan's call just ended and none is under way: the
# next one starts at once (or the attempt ends, and its status says how).
BETWEEN_CALLS = "Starting the next call"


def progress(
    kind: str,
    numbers: Sequence[int],
    of: int,
    labels: Sequence[str] = (),
    *,
    round_number: int = 0,
    limit: int,
) -> str:
    """Say in words which calls of a plan are under way (a `progress` event's label), in
    at most `limit` characters: one or several parts read side by side ("Reading part 3
    of 12: Chapter 4", "Reading parts 2 and 3 of 12: Chapter 2; Chapter 3"), one round's
    calls ("Combining notes, round 1: notes 2 and 3 of 3"), or the report's call.

    `numbers` are the calls' places among the `of` of their kind (or of their round), in
    order, and `labels` what each part reads. Several parts are named with their labels
    only when all of them fit; one part's label is cut to fit."""
    if kind == "part":
        head = f"Reading {'part' if len(numbers) == 1 else 'parts'} {_listed(numbers)} of {of}"
        if len(numbers) == 1:
            return _cut(f"{head}: {labels[0]}", limit) if labels else head
        named = f"{head}: {'; '.join(labels)}"
        if labels and len(named) <= limit:
            return named
        return head if len(head) <= limit else f"Reading {len(numbers)} of the {of} parts"
    if kind == "round":
        head = f"Combining notes, round {round_number}: "
        said = f"{head}notes {_listed(numbers)} of {of}"
        return said if len(said) <= limit else f"{head}{len(numbers)} of its {of} calls"
    return "Writing the report from the notes"


def _listed(items: Sequence[object]) -> str:
    """Return "3", "2 and 3", "2, 3 and 5"."""
    words = [str(item) for item in items]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


# A `progress` event's label while the model reads the report's prompt.
READING = "The model is reading your document"
# A report's note on the pages read by OCR names this many documents at most.
OCR_NOTE_DOCUMENTS = 5


def read_by_ocr(documents: Sequence[tuple[str, Sequence[int]]]) -> str:
    """Say which pages of which documents were read by OCR: "Pages 1-3 and 7 of scan.pdf
    were read by OCR." (a sentence; "" when none were)."""
    listed = [(name, pages) for name, pages in documents if pages]
    said = [
        f"{_page_ranges(pages)} of {' '.join(name.split())}"
        for name, pages in listed[:OCR_NOTE_DOCUMENTS]
    ]
    if len(listed) > OCR_NOTE_DOCUMENTS:
        said.append(f"pages of {len(listed) - OCR_NOTE_DOCUMENTS} more documents")
    if not said:
        return ""
    pages = listed[0][1]
    verb = "was" if len(listed) == 1 and len(pages) == 1 else "were"
    sentence = f"{'; '.join(said)} {verb} read by OCR."
    return sentence[0].upper() + sentence[1:]


# Page ranges named at most: a document that alternates scanned and typed pages is
# summed up after this many.
OCR_NOTE_RANGES = 8


def _page_ranges(pages: Sequence[int]) -> str:
    runs: list[list[int]] = []
    for page in sorted(set(pages)):
        if runs and page == runs[-1][1] + 1:
            runs[-1][1] = page
        else:
            runs.append([page, page])
    named = [f"{a}" if a == b else f"{a}\u2013{b}" for a, b in runs[:OCR_NOTE_RANGES]]
    if len(runs) > OCR_NOTE_RANGES:
        named.append(f"{sum(b - a + 1 for a, b in runs[OCR_NOTE_RANGES:])} more")
    return f"{'page' if len(set(pages)) == 1 else 'pages'} {_listed(named)}"


# What the report's call of a plan of calls reads: the notes, not the documents.
READING_NOTES = "The model is reading its notes"


def reading(tokens_read: int | None, tokens_total: int | None, *, notes: bool = False) -> str:
    """Say how far the model has read: "The model is reading your document: 1,200 of
    3,500 tokens", or, where the server does not say, "The model is reading your
    document…". `notes`: the report's call of a plan, which reads the notes on the parts."""
    what = READING_NOTES if notes else READING
    if tokens_read is not None and tokens_total:
        return f"{what}: {tokens_read:,} of {tokens_total:,} tokens"
    return f"{what}…"


def time_left(seconds: float) -> str:
    """Say how long the reading should take yet: "about 20 s left", "about 3 min left"."""
    if seconds < 1:
        return "almost done"
    amount = f"{round(seconds)} s" if seconds < 90 else f"{round(seconds / 60)} min"
    return f"about {amount} left"
