"""The retry table (docs/providers.md): what a failed provider call or a lost worker leaves
the task in — another attempt, `failed`, or `reconciliation_required`.

The one home of the rule. The attempt core asks it about a provider's error; the reaper
asks it about an attempt whose worker stopped answering. It reads no clock and no database:
callers pass the instant and what they know.
"""

from __future__ import annotations

import dataclasses
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
        health = {
            "provider_down": provider_down(error, text_arrived=text_arrived),
            "provider_answered": error.status_code is not None and error.status_code < 500,
        }
        delay = error.retry_after_s or 0.0
        if (
            error.retry is Retry.RETRYABLE
            and not text_arrived
            and attempt < self.max_attempts
            and delay <= self.max_wait_s
            and now + delay < deadline
        ):
            return Outcome(
                Status.QUEUED, error.error_type, error.message, retry_after_s=delay, **health
            )
        return Outcome(Status.FAILED, error.error_type, error.message, plain=error.plain, **health)

    def while_provider_down(self, outcome: Outcome) -> Outcome:
        """How an attempt ends when its call failed for the provider's own reasons and the
        provider's circuit is open (this failure opened it, or it was the probe): the task
        waits, queued whatever attempts it used, for the circuit to let a call through
        again; its deadline still ends it (docs/providers.md)."""
        if outcome.status == Status.QUEUED:  # a retry as the table has it: its wait stands
            return outcome
        return dataclasses.replace(outcome, status=Status.QUEUED, retry_after_s=0.0, plain=False)

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


def provider_down(error: ProviderError, *, text_arrived: bool) -> bool:
    """Whether a failed call counts against the provider's circuit: the provider's own
    failure (an HTTP 5xx, 503 overloaded included, or no connection, refused or reset)
    before any text. A 4xx (429 too), a failure after text, a cancel or an unknown
    outcome never does."""
    return (
        error.retry is Retry.RETRYABLE
        and not text_arrived
        and (error.status_code is None or error.status_code >= 500)
    )
