"""Percentiles of latency samples, by the nearest-rank method, with censored samples.

Nearest rank: the p-th percentile of n sorted samples is the sample at rank
ceil(p / 100 * n) (1-based). It is always a value that was really observed, never an
interpolation between two, so a P99 is a latency some user really waited.

A *censored* sample is a lower bound: a task that timed out before reaching the
milestone (first text, say) waited at least until it ended. Such a task is counted at
that bound, never dropped (dropping the slowest tasks would flatter the figures); when a
percentile lands on a censored sample it is reported as "at least" that value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class Sample:
    ms: float
    censored: bool = False  # a lower bound: the task timed out before the milestone


@dataclass(frozen=True)
class Figure:
    ms: float
    at_least: bool  # the percentile fell on a censored sample


@dataclass(frozen=True)
class Summary:
    count: int
    censored: int
    small: bool  # fewer samples than the threshold: P95/P99 are not to be trusted
    figures: dict[int, Figure | None]  # percentile → figure; None when there is no sample

    def __getitem__(self, p: int) -> Figure | None:
        return self.figures[p]


def nearest_rank(n: int, p: float) -> int:
    """Return the 0-based index of the p-th percentile of n sorted samples."""
    if n < 1:
        raise ValueError("no samples")
    if not 0 < p <= 100:
        raise ValueError(f"percentile must be in (0, 100], not {p}")
    return max(1, math.ceil(p / 100 * n)) - 1


def summarize(
    samples: Iterable[Sample | float], *, small_below: int, percentiles=PERCENTILES
) -> Summary:
    """Return the count, censored count, small-sample flag and the percentiles of `samples`.

    Plain numbers are exact samples. Ties sort exact before censored, so a censored
    bound is only reported when it is really what the rank lands on.
    """
    ordered = sorted(
        (s if isinstance(s, Sample) else Sample(float(s)) for s in samples),
        key=lambda s: (s.ms, s.censored),
    )
    figures: dict[int, Figure | None] = {}
    for p in percentiles:
        if ordered:
            picked = ordered[nearest_rank(len(ordered), p)]
            figures[p] = Figure(picked.ms, picked.censored)
        else:
            figures[p] = None
    return Summary(
        count=len(ordered),
        censored=sum(s.censored for s in ordered),
        small=len(ordered) < small_below,
        figures=figures,
    )
