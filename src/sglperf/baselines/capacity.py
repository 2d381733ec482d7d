"""Capacity: the highest request rate of a ladder at which a workload still meets its SLO.

A capacity workload is measured at each rate of its ladder, lowest first, as an open-loop workload
(`sglperf.model.workload.Capacity`). Each round at a rate gives a goodput share: the share of its
requests that met every slo target. A rate **meets** the SLO when the typical round keeps at least
the workload's goodput target (say 0.9), **misses** it when the typical round falls short, and is
**unclear** when its rounds do not say which.

Why a sign test on rounds
-------------------------
The question at one rate is whether the median round's share is above or below a fixed target, not
how far. Shares are bounded, pile up at 1.0 and jump in steps of one request, so a t interval would
lean on a normality they do not have. The sign test counts the rounds on each side of the target
(a round exactly at it meets it) and asks how likely that split is if the median sat on the target:
a binomial tail, exact, with no assumption on the distribution. Rounds are the unit, not requests,
because requests of one round queue behind each other and are not independent.

Decision rule
-------------
``k`` of ``n`` rounds met the target. Meets iff ``P(Binomial(n, 1/2) >= k) < ALPHA``; misses iff
``P(Binomial(n, 1/2) >= n - k) < ALPHA``; else unclear. ALPHA is 0.01, as for the other verdicts
(`sglperf.baselines.stats`): a capacity that fell fails a release. A unanimous split reaches it from
``MIN_ROUNDS`` = 7 rounds on (1/128); the default 12 rounds tolerate one round on the other side
(p = 0.003), two already not (p = 0.019).

The capacity is the highest rate such that it and every rate below it meets; the search stops at
the first rate that misses (higher rates are not measured: the time stays bounded), and an unclear
rate neither raises the capacity nor stops the search. Against the baseline's ladder the capacity
**fell** when some rate that met the SLO in the baseline misses it now. Both are confident
statements at ALPHA, so noise at a rate near the target reads unclear, never as a fall.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

ALPHA = 0.01
MIN_ROUNDS = 7  # the fewest at which a unanimous sign test gets below ALPHA


class Level(Enum):
    MEETS = "meets"
    MISSES = "misses"
    UNCLEAR = "unclear"


def sign_test_p(successes: int, n: int) -> float:
    """One-sided exact sign test: P(Binomial(n, 1/2) >= successes)."""
    if not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n (got {successes} of {n})")
    return sum(math.comb(n, i) for i in range(successes, n + 1)) / (1 << n)


@dataclass(frozen=True)
class RateStep:
    """One rate of the ladder: its rounds' goodput shares judged against the target."""

    rate: float
    shares: tuple[float, ...]
    target: float

    @property
    def met(self) -> int:
        """Rounds whose share reached the target."""
        return sum(share >= self.target for share in self.shares)

    @property
    def level(self) -> Level:
        n = len(self.shares)
        if sign_test_p(self.met, n) < ALPHA:
            return Level.MEETS
        if sign_test_p(n - self.met, n) < ALPHA:
            return Level.MISSES
        return Level.UNCLEAR

    def describe(self) -> str:
        n, level = len(self.shares), self.level
        p = sign_test_p(self.met if level is not Level.MISSES else n - self.met, n)
        return (
            f"{self.rate:g} req/s: {self.met} of {n} rounds kept goodput >= {self.target:g} "
            f"({level.value}, sign test p = {p:.3g})"
        )


@dataclass(frozen=True)
class Ladder:
    """The rates measured, lowest first, and the capacity they show."""

    steps: tuple[RateStep, ...]

    @property
    def capacity(self) -> float | None:
        """The highest rate that meets with every rate below it; None when the lowest does not."""
        found = None
        for step in self.steps:
            if step.level is not Level.MEETS:
                break
            found = step.rate
        return found

    @property
    def first_miss(self) -> float | None:
        return next((s.rate for s in self.steps if s.level is Level.MISSES), None)

    def describe(self) -> str:
        capacity, miss = self.capacity, self.first_miss
        if capacity is None:
            found = f"below {self.steps[0].rate:g} req/s" if self.steps else "not measured"
        else:
            found = f"{capacity:g} req/s"
        if miss is not None:
            found += f" (misses at {miss:g} req/s)"
        elif capacity is not None and capacity == self.steps[-1].rate:
            found += " (or more: the highest rate measured meets)"
        return found


def ladder(steps: Sequence[RateStep]) -> Ladder:
    """The steps sorted by rate; rates must be distinct."""
    ordered = tuple(sorted(steps, key=lambda s: s.rate))
    rates = [s.rate for s in ordered]
    if len(set(rates)) != len(rates):
        raise ValueError(f"a capacity ladder has each rate once (got {rates})")
    return Ladder(ordered)


def stop_above(steps: Sequence[RateStep]) -> RateStep | None:
    """The step that ends the search (the lowest that misses), if any: higher rates are not measured."""
    return next((s for s in sorted(steps, key=lambda s: s.rate) if s.level is Level.MISSES), None)


@dataclass(frozen=True)
class CapacityComparison:
    fell: bool
    lines: tuple[str, ...]  # the headline first


def compare(current: Ladder, baseline: Ladder) -> CapacityComparison:
    """Whether the capacity fell: a rate the baseline met (confidently) that now misses (confidently)."""
    before = {s.rate: s for s in baseline.steps}
    headline = f"capacity {current.describe()}; baseline {baseline.describe()}"
    for step in current.steps:
        old = before.get(step.rate)
        if old is not None and old.level is Level.MEETS and step.level is Level.MISSES:
            return CapacityComparison(
                True,
                (
                    f"capacity fell: {headline}",
                    f"now {step.describe()}",
                    f"baseline {old.describe()}",
                ),
            )
    unclear = [
        s.describe()
        for s in current.steps
        if s.level is Level.UNCLEAR and s.rate in before and before[s.rate].level is Level.MEETS
    ]
    return CapacityComparison(False, (headline, *(f"unclear now where the baseline met: {u}" for u in unclear)))
