"""Paired comparison of two variants measured in counterbalanced (ABBA) sessions.

A variant effect compares the reference's rounds with the variant's rounds of the same run
(`sglperf.baselines.variant_effects`). Run one after the other (all of A, then all of B), the two
samples are only comparable if the machine stayed the same in between: a GPU warming up, a clock
throttling, a neighbour starting a job turn into a difference between the variants. The rank-sum
test cannot tell drift from effect; with 2% round noise a slowdown of a few percent per minute is
called a regression almost every time (bench/paired_quality.py).

Why ABBA sessions and paired log ratios
---------------------------------------
Sessions run in the order A1 B1 B2 A2 (then A3 B3 B4 A4 ...). Round ``j`` of the four sessions of a
quad gives one pair::

    d_j = ((log B1_j - log A1_j) + (log B2_j - log A2_j)) / 2

With equally spaced sessions, B1 ran one spacing after A1 and B2 one spacing before A2: the drift the
first difference charges to the variant, the second credits back. A drift linear in time in log space
(a multiplicative ``exp(k * t)`` slowdown) cancels exactly; a smooth drift cancels to first order,
leaving only its curvature. Each pair is a ratio, so the verdict does not depend on units. The price is
twice the server starts of "A then B" for the same rounds per variant, and four rounds per pair.

Why a Wilcoxon signed-rank test
-------------------------------
The pairs are one sample of log ratios; the question is whether they centre on 0. The signed-rank test
keeps what `sglperf.baselines.stats` chose the rank-sum test for: one stalled round moves one rank
however far off it is, no normality is assumed at a dozen pairs, and ranks are unchanged by scale.
It assumes the pairs are symmetric about their centre, which a difference of two log ratios of alike
noise is.

* Exact: pairs that are exactly 0 carry no sign and are dropped (Wilcoxon's convention); ties among
  the remaining ``|d|`` get midranks, doubled so that every score is an integer. Under the null each
  pair's sign is a fair coin, so the statistic (the sum of the positive pairs' scores) has a
  distribution counted by dynamic programming over the ``2**n`` sign patterns. The counts are integers
  up to ``2**n``, exact in float64 up to ``EXACT_MAX_PAIRS`` = 52 nonzero pairs (``2**52 < 2**53``).
  More pairs use the normal approximation with the midranks' own variance (which is the tie
  correction) and a continuity correction of half a rank.
* Symmetric: negating every pair (swapping reference and variant) swaps the two one-sided p-values
  bitwise, because the counts are exact and symmetric.

The estimate is the Hodges-Lehmann estimate, the median of the Walsh averages ``(d_i + d_j) / 2``
(``i <= j``); its interval, at level ``1 - 2 * alpha``, runs between the Walsh averages of the critical
rank ``k`` of the signed-rank null distribution and its mirror ``M + 1 - k`` (of ``M = n(n+1)/2``).
This is the interval the one-sided tests invert: without ties or zeros "the interval's lower end is
above 0" is the same event as "p_higher < alpha". Both are reported as ratios variant / reference.
With ``2**-n >= alpha`` no sign pattern is rare enough to reach alpha: the comparison is NOT_JUDGED and
its interval spans every Walsh average.

Decision rule
-------------
The floor is applied as `sglperf.baselines.variant_effects.effect_verdict` applies it: as written on the
worse side (decode 3% slower is a ratio of 0.97; a latency 5% longer is 1.05) and mirrored in log space
on the better side, so swapping the variants swaps BETTER and WORSE exactly.

* BETTER / WORSE: the estimate lies beyond the floor that way and the one-sided p-value that way is
  below alpha. Both are needed: the floor keeps a real but irrelevant shift from being called a move,
  the test a noisy estimate.
* NO_EFFECT: the whole interval lies within the floor on both sides (an equivalence test: with each
  side at alpha, "no effect beyond the floor" is claimed at confidence ``1 - alpha``).
* UNDECIDED: anything else; more blocks would tell.

Scale invariance and antisymmetry hold exactly, not only up to rounding, where floating point allows:
each session difference is taken as ``(log(b/a) - log(a/b)) / 2``, which is negated bitwise when ``a``
and ``b`` trade places and unchanged bitwise when both are multiplied by a power of two; and everything
downstream of the log ratios is computed in log space, with sums whose operands merely trade places
under negation. (A ratio reported as ``exp`` of a log is ``1 / ratio`` of the swapped one only to
rounding.)

Defaults and their trade-off (bench/paired_quality.py)
------------------------------------------------------
2% log-normal round noise, 12 rounds a session, 1-minute sessions 0.2 min apart, decode's 3% floor,
alpha 0.01, 2000 trials per cell; drift slows the metric by a share per minute of the run:

* No drift: one block (4 sessions) calls an A/A pair different never, "same" 96% of the time (the
  rank-sum test of "A then B": 69%, with half the sessions and rounds) and catches a 5% drop always.
* 5% per minute: "A then B" calls an A/A pair different in 99% of runs; one ABBA block in none, and
  still clears 94% of them.
* 10% per minute: the drift's curvature leaves about 1% of bias in one block: A/A called different 0.1%,
  a quarter undecided. A second block, run only when the first left the answer undecided, clears all
  but 0.1% of them, for 5.1 sessions per comparison on average (4.2 without drift).
* The pairs are assumed independent given the drift. A slow state shared by one session's rounds
  (thermal, placement) is a session effect that pairing does not remove; the floor guards it, as in
  `sglperf.baselines.stats`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from sglperf.baselines.stats import DEFAULT_ALPHA, _doubled_midranks, _exp, _resolve, _validate
from sglperf.model.metrics import Direction
from sglperf.model.variant_effect import EffectVerdict

EXACT_MAX_PAIRS = 52  # 2**52 < 2**53: every sign-pattern count is an exact float64 integer

_SIDES = ("reference", "variant")


def abba_log_ratios(
    reference_blocks: Sequence[Sequence[float]], variant_blocks: Sequence[Sequence[float]]
) -> list[float]:
    """The paired log ratios (variant / reference) of sessions run A1 B1 B2 A2, A3 B3 B4 A4, ...

    ``reference_blocks[k]`` and ``variant_blocks[k]`` are the rounds of each side's k-th session in time
    order. Sessions 2i and 2i+1 of each side form one quad; round ``j`` of a quad (up to its shortest
    session) gives ``((log b1_j - log a1_j) + (log b2_j - log a2_j)) / 2``. Raises ValueError on an odd
    or unequal number of sessions, or a value that is not finite and positive.
    """
    sides = [_sessions(side, blocks) for side, blocks in zip(_SIDES, (reference_blocks, variant_blocks))]
    reference, variant = sides
    if len(reference) != len(variant):
        raise ValueError(
            f"reference has {len(reference)} sessions but variant has {len(variant)}; ABBA needs the same count"
        )
    ratios: list[float] = []
    for i in range(0, len(reference), 2):
        a1, a2, b1, b2 = reference[i], reference[i + 1], variant[i], variant[i + 1]
        rounds = min(len(a1), len(a2), len(b1), len(b2))
        for j in range(rounds):
            # Halving a sum of two exactly antisymmetric terms keeps the pair exactly antisymmetric.
            ratios.append(0.5 * (_log_ratio(b1[j], a1[j]) + _log_ratio(b2[j], a2[j])))
    return ratios


@dataclass(frozen=True)
class PairedComparison:
    """One metric's paired verdict; ratio and interval are variant / reference."""

    metric: str
    direction: Direction
    n_pairs: int
    ratio: float  # exp of the Hodges-Lehmann estimate of the paired log ratios
    ci_low: float  # exp of the Walsh-average interval at level 1 - 2 * alpha
    ci_high: float
    p_lower: float  # exact one-sided signed-rank p-value: the variant tends lower
    p_higher: float  # ... the variant tends higher
    alpha: float
    floor: float  # the practical floor: the metric's relative threshold
    verdict: EffectVerdict

    @property
    def level(self) -> float:
        return 1.0 - 2.0 * self.alpha


def compare_paired(
    metric: str, log_ratios: Sequence[float], floor: float, alpha: float = DEFAULT_ALPHA
) -> PairedComparison:
    """Judge paired log ratios (`abba_log_ratios`) of ``metric``: variant against reference.

    Nothing here is random: equal inputs give equal verdicts, and negated inputs the mirrored verdict.
    """
    direction, floor, alpha = _resolve(metric, None, floor, alpha)
    d = _validate(metric, "log-ratio", log_ratios, positive=False)
    n = len(d)
    p_lower, p_higher = _signed_rank_p_values(d)
    if n == 0:
        nan = math.nan
        return PairedComparison(
            metric, direction, 0, nan, nan, nan, p_lower, p_higher, alpha, floor, EffectVerdict.NOT_JUDGED
        )
    walsh = _walsh_averages(d)
    estimate = _middle(walsh)
    # Below this even "every pair the same way" is not rare enough to reach alpha.
    judged = 2.0**-n < alpha
    if judged:
        k = _ci_rank(n, alpha)  # the interval is [W_(k), W_(M+1-k)], 1-based
        low, high = float(walsh[k - 1]), float(walsh[len(walsh) - k])
    else:
        low, high = float(walsh[0]), float(walsh[-1])
    verdict = _verdict(direction, floor, alpha, estimate, low, high, p_lower, p_higher) if judged else None
    return PairedComparison(
        metric,
        direction,
        n,
        ratio=_exp(estimate),
        ci_low=_exp(low),
        ci_high=_exp(high),
        p_lower=p_lower,
        p_higher=p_higher,
        alpha=alpha,
        floor=floor,
        verdict=verdict or EffectVerdict.NOT_JUDGED,
    )


def _signed_rank_p_values(log_ratios: np.ndarray) -> tuple[float, float]:
    """One-sided Wilcoxon signed-rank p-values: (pairs tend below 0, pairs tend above 0).

    Zeros are dropped; ties share doubled midranks. Exact up to ``EXACT_MAX_PAIRS`` nonzero pairs.
    """
    nonzero = log_ratios[log_ratios != 0.0]
    n = len(nonzero)
    if n == 0:  # no pair has a sign: no evidence either way
        return 1.0, 1.0
    scores = _doubled_midranks(np.abs(nonzero))
    observed = int(scores[nonzero > 0].sum())
    if n > EXACT_MAX_PAIRS:
        return _normal_p_values(scores, observed)
    at_most, at_least = _sign_pattern_tails(tuple(sorted(scores.tolist())))
    total = 2.0**n
    return float(at_most[observed]) / total, float(at_least[observed]) / total


def _verdict(
    direction: Direction,
    floor: float,
    alpha: float,
    estimate: float,
    low: float,
    high: float,
    p_lower: float,
    p_higher: float,
) -> EffectVerdict:
    higher_is_better = direction is Direction.HIGHER_IS_BETTER
    # The floor as written on the worse side, mirrored in log space on the better side.
    bound = -math.log1p(-floor) if higher_is_better else math.log1p(floor)
    gain = estimate if higher_is_better else -estimate
    p_better, p_worse = (p_higher, p_lower) if higher_is_better else (p_lower, p_higher)
    if gain > bound and p_better < alpha:
        return EffectVerdict.BETTER
    if gain < -bound and p_worse < alpha:
        return EffectVerdict.WORSE
    if -bound <= low and high <= bound:
        return EffectVerdict.NO_EFFECT
    return EffectVerdict.UNDECIDED


def _sessions(side: str, blocks: Sequence[Sequence[float]]) -> list[list[float]]:
    sessions: list[list[float]] = []
    for k, block in enumerate(blocks):
        try:
            values = [float(v) for v in block]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{side} session {k}: values are not numbers: {exc}") from exc
        bad = [v for v in values if not (math.isfinite(v) and v > 0.0)]
        if bad:
            # Rates and durations are positive; a zero or NaN is a broken measurement, not a fast one.
            raise ValueError(f"{side} session {k}: values must be finite and positive, got {bad[:3]}")
        sessions.append(values)
    if len(sessions) % 2:
        raise ValueError(f"{side} has {len(sessions)} sessions: ABBA needs them in twins (A1 B1 B2 A2), an even count")
    return sessions


def _log_ratio(b: float, a: float) -> float:
    """log(b / a), negated bitwise when a and b trade places and unchanged when both are scaled by a
    power of two (which ``log(b) - log(a)`` is not: each log rounds on its own)."""
    up, down = b / a, a / b
    if _NORMAL_MIN <= up <= _NORMAL_MAX and _NORMAL_MIN <= down <= _NORMAL_MAX:
        return 0.5 * (math.log(up) - math.log(down))
    # A quotient beyond float range (1e-300 against 1e300): the difference of logs is still finite.
    return math.log(b) - math.log(a)


_NORMAL_MIN = 2.2250738585072014e-308  # the smallest normal float: below it a quotient loses digits
_NORMAL_MAX = 1.7976931348623157e308


def _walsh_averages(d: np.ndarray) -> np.ndarray:
    i, j = np.triu_indices(len(d))
    # d_i + d_j, not d_j + d_i: addition commutes exactly, so negated inputs give negated averages.
    return np.sort(0.5 * (d[i] + d[j]))


def _middle(ordered: np.ndarray) -> float:
    """The median of sorted values; the two middle ones of an even count as (low + high) / 2, which
    negated inputs negate exactly (low + (high - low) / 2 would not). Log ratios are far from overflow."""
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return 0.5 * (float(ordered[mid - 1]) + float(ordered[mid]))


@lru_cache(maxsize=256)
def _sign_pattern_tails(scores: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """For each value t of the positive scores' sum: how many of the 2**n sign patterns give a sum
    <= t, and how many >= t. Integers held exactly in float64 for n <= EXACT_MAX_PAIRS."""
    top = sum(scores)
    counts = np.zeros(top + 1)
    counts[0] = 1.0
    for score in scores:
        # Each pair's score is in the sum or not; the right side is evaluated before it is stored.
        counts[score:] = counts[score:] + counts[: top + 1 - score]
    at_most, at_least = np.cumsum(counts), np.cumsum(counts[::-1])[::-1]
    for cached in (at_most, at_least):
        cached.setflags(write=False)  # shared by every caller through the cache
    return at_most, at_least


def _normal_p_values(scores: np.ndarray, observed: int) -> tuple[float, float]:
    # Each score is in the sum with probability 1/2: the midranks' own variance, ties included.
    centred = observed - float(scores.sum()) / 2.0
    sd = math.sqrt(float((scores.astype(float) ** 2).sum()) / 4.0)
    # Continuity: half a rank, one unit of the doubled scores.
    z_lower, z_higher = (centred + 1.0) / sd, (centred - 1.0) / sd
    return 0.5 * math.erfc(-z_lower / math.sqrt(2)), 0.5 * math.erfc(z_higher / math.sqrt(2))


@lru_cache(maxsize=256)
def _ci_rank(n: int, alpha: float) -> int:
    """Largest k with P(T <= k - 1) <= alpha for the no-ties signed-rank statistic T of n pairs (ranks
    1..n); the caller ensures 2**-n < alpha, so k >= 1."""
    if n <= EXACT_MAX_PAIRS:
        at_most, _ = _sign_pattern_tails(tuple(range(1, n + 1)))
        return int(np.flatnonzero(at_most / 2.0**n <= alpha)[-1]) + 1
    mean, sd = n * (n + 1) / 4.0, math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    z = NormalDist().inv_cdf(1.0 - alpha)
    return max(1, math.floor(mean - z * sd + 0.5))
