"""The retry table (docs/providers.md): what a failed provider call or a lost worker leaves
the task in — another attempt, `failed`, or `reconciliation_required`.

The one home of the rule. The attempt core asks it about a provider's error; the reaper
asks it about an attempt whose worker stopped answering. It reads no clock and no database:
callers pass the instant and what they know.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from reports.providers.base import ProviderError, Retry
from reports.states import Status
from reports.worker.outcome import Outcome


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int  # attempts a task may have in all
    max_wait_s: float  # the longest `Retry-After` worth waiting for
    rerun_lost: bool  # whether an attempt whose worker was lost is run again

    @classmethod
    def from_settings(cls) -> RetryPolicy:
        return cls(
            max_attempts=settings.REPORTS_MAX_ATTEMPTS,
            max_wait_s=settings.REPORTS_RETRY_MAX_WAIT_S,
            rerun_lost=settings.REPORTS_RERUN_LOST_ATTEMPTS,
        )

    def after_provider_error(
        self, error: ProviderError, *, attempt: int, text_arrived: bool, now: float, deadline: float
    ) -> Outcome:
        """How an attempt ends on a provider's error.

        Whether the request took effect unknown: reconciliation. Retryable (429, 5xx, no
        connection): another attempt while attempts remain, no text arrived (a retry never
        appends to text a user saw) and the requested wait is short enough and ends before
        the deadline. Anything else fails the task.
        """
        if error.retry is Retry.UNKNOWN:
            return Outcome(
                Status.RECONCILIATION_REQUIRED, error.error_type, error.message, plain=error.plain
            )
        delay = error.retry_after_s or 0.0
        if (
            error.retry is Retry.RETRYABLE
            and not text_arrived
            and attempt < self.max_attempts
            and delay <= self.max_wait_s
            and now + delay < deadline
        ):
            return Outcome(Status.QUEUED, error.error_type, error.message, retry_after_s=delay)
        return Outcome(Status.FAILED, error.error_type, error.message, plain=error.plain)

    def after_lost_worker(self, *, task_status: str, attempt: int) -> str:
        """The status a task moves to when the worker running its attempt was lost.

        A task lost while `finalizing` fails. Otherwise it runs again while attempts
        remain, unless re-running is off: then whether the call ran is for an
        administrator to say.
        (A worker lost while reading documents blames the document: `leases` ends that
        task `invalid_input` before asking here.)
        """
        if task_status == Status.FINALIZING:
            return Status.FAILED
        if not self.rerun_lost:
            return Status.RECONCILIATION_REQUIRED
        if attempt < self.max_attempts:
            return Status.QUEUED
        return Status.FAILED
