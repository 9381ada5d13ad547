"""What a delivered report costs, per model: every attempt's spend over the reports delivered.

A cheap model that fails often can cost more per report a user gets than a dearer one that
succeeds: the attempts of failed, cancelled and retried tasks are paid for too
(reports/budgets.py: an attempt's cost is the sum of its calls). So the spend of every
ended attempt of the window's tasks, whatever their outcome, is divided by the number of
succeeded tasks, beside the plain cost per attempt. An attempt whose cost is unknown (a
lost worker, a model without a price) is left out of the spend and counted, and the cost
per delivered report is then a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from django.db.models import Count, Q, Sum

from reports.models import Status

NO_MODEL = "(no model recorded)"


@dataclass(frozen=True)
class ModelCost:
    model: str
    tasks: int
    delivered: int  # succeeded tasks
    attempts: int  # ended attempts, of tasks of every outcome
    unknown: int  # of which the cost is unknown
    spend_micros: int  # the known costs' sum
    # Models that cost more per attempt but less per delivered report than this one.
    dearer_than: tuple[str, ...] = ()

    @property
    def per_attempt(self) -> int | None:
        priced = self.attempts - self.unknown
        return None if priced == 0 else round(self.spend_micros / priced)

    @property
    def per_delivered(self) -> int | None:
        return None if self.delivered == 0 else round(self.spend_micros / self.delivered)


def model_costs(tasks) -> list[ModelCost]:
    """Return the cost per attempt and per delivered report of each model of `tasks`, the
    dearest per delivered report first (models that delivered nothing last)."""
    ended = Q(attempts__ended_at__isnull=False)
    rows = (
        tasks.order_by()
        .values("model")
        .annotate(
            tasks=Count("id", distinct=True),
            delivered=Count("id", distinct=True, filter=Q(status=Status.SUCCEEDED)),
            # Not named `attempts`: that would hide the relation from the next two.
            ended_attempts=Count("attempts", filter=ended),
            priced=Count("attempts__cost_micros", filter=ended),
            spend=Sum("attempts__cost_micros", filter=ended),
        )
    )
    found = [
        ModelCost(
            model=row["model"] or NO_MODEL,
            tasks=row["tasks"],
            delivered=row["delivered"],
            attempts=row["ended_attempts"],
            unknown=row["ended_attempts"] - row["priced"],
            spend_micros=row["spend"] or 0,
        )
        for row in rows
    ]
    found = [_with_dearer_than(cost, found) for cost in found]
    return sorted(found, key=lambda c: (c.per_delivered is None, -(c.per_delivered or 0), c.model))


def _with_dearer_than(cost: ModelCost, others: list[ModelCost]) -> ModelCost:
    if cost.per_attempt is None or cost.per_delivered is None:
        return cost
    dearer_than = tuple(
        other.model
        for other in others
        if other.per_attempt is not None
        and other.per_delivered is not None
        and other.per_attempt > cost.per_attempt
        and other.per_delivered < cost.per_delivered
    )
    return replace(cost, dearer_than=dearer_than)
