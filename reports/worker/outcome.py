"""How an attempt ends: the task status it moves to and why (no I/O, no Django set-up)."""

from __future__ import annotations

from dataclasses import dataclass

from reports import wording


@dataclass(frozen=True)
class Outcome:
    """How an attempt ends: the task status it moves to and why."""

    status: str
    error_type: str = ""
    message: str = ""
    retry_after_s: float | None = None
    plain: bool = False  # the message is fit for users as it is (ProviderError.plain)
    # What the call says of the provider, for its circuit (reports.worker.breaker): it
    # failed for the provider's own reasons (5xx, overloaded, no connection, before any
    # text), or the provider answered it with a refusal (4xx) and so is up.
    provider_down: bool = False
    provider_answered: bool = False

    @property
    def user_message(self) -> str:
        """The message a user is shown; the provider's own words stay on the attempt."""
        return wording.user_message(self.error_type, self.message, plain=self.plain)
