"""Noise-aware comparison of one metric's samples against its stored baseline.

A regression needs BOTH a practical effect (the median moved the wrong way by more
than the metric's relative threshold) AND statistical evidence (a one-sided rank
test, significant at alpha). The threshold keeps real-but-irrelevant shifts from
failing a release; the test keeps a noisy run from failing on a lucky draw.

Why a Mann-Whitney rank-sum test
--------------------------------
GPU timings are skewed, heavy-tailed and now and then hit by a stall (a GC pause,
a cold cache, a neighbour's kernel), and a run affords only a dozen samples.

* Robust: one stalled sample moves one rank, however far it is off.
* Distribution-free: no normality assumption, valid at 5 to 20 samples per side.
* Scale invariant: the ranks of ``c * x`` are those of ``x``, so the p-value does not
  depend on units; medians scale too, so their ratio (and the verdict) is unchanged.
* Exact: up to ``EXACT_MAX_N`` pooled samples the permutation distribution of the
  rank sum, ties included (midranks), is counted by dynamic programming in integers
  that float64 holds exactly, so p-values are exact and bitwise symmetric when
  baseline and current are swapped. Larger runs use the normal approximation with
  tie correction (and continuity correction).

The CI is the Hodges-Lehmann interval of the multiplicative shift (the order
statistics of all pairwise ratios current/baseline), at level ``1 - 2 * alpha``:
it is the interval the one-sided test inverts, so "upper bound < 1" and
"p < alpha in the worse direction" agree (exactly when there are no ties). A bootstrap CI of the ratio of medians
was rejected: at n=12 a bootstrapped median takes a handful of values, its
percentile interval undercovers, and it would need a random seed to be stable.

Decision rule
-------------
``d = log(current_median / baseline_median)``, signed so that positive is better.
Regression iff ``d`` is worse than the threshold, taken exactly as written on the
regression side (decode 3% slower means ratio < 0.97; TTFT 5% slower means ratio >
1.05), and the worse-direction p-value is below alpha. Improvement uses the mirror
image of the regression bound in log space (decode needs ratio > 1/0.97, TTFT
ratio < 1/1.05), so swapping baseline and current swaps regression and improvement
exactly. Fewer than ``MIN_SAMPLES`` on either side is INSUFFICIENT, never a pass.

Defaults and their trade-off (bench/stats_quality.py, log-normal noise)
-----------------------------------------------------------------------
12 samples per side, alpha 0.01 and a 3% floor for decode, 10 000 trials per cell:
at 2% CV false alarms are ~0.01% (0.15% with one x0.7 stalled sample), a 5% drop is
caught 98.6% of the time, a 10% drop always. A drop exactly at the floor is caught
half the time, by construction: the floor is the point estimate's cut-off.

* Samples: 10 already meets the targets (5% drop caught 97.7%) with little headroom;
  12 buys margin against noise heavier than log-normal for 20% more GPU time.
  Samples needed scale with CV**2, so a metric twice as noisy needs 4x the samples.
* Threshold: a 2% decode floor would catch 3% drops 78% of the time, but false
  alarms at 2% CV rise to 0.3% (0.8% with a stall); 3% keeps them near zero.
  TTFT and E2E carry queueing jitter, so they get 5% (at 5% CV: 0.5% false alarms,
  10% rise caught 96%).
* Alpha: at <= 2% CV the floor dominates and 0.05 would change nothing; at 5% CV,
  where the floor no longer protects, 0.05 triples false alarms (3%, 6% with a
  stall) while 0.01 keeps them near 1%. Many gates run per release, so 0.01.
* At 5% CV only ~46% of 5% drops are caught: record more samples for such a metric.
* The model assumes independent samples. Samples from one server session can share
  a slow state (thermal, placement); the floor, not the p-value, guards that.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from sglperf.model.metrics import METRICS, Direction, MetricOutcome, format_level, format_ratio_change, unit_of

DEFAULT_ALPHA = 0.01  # several metrics x deployments per run: keep each gate's false alarms low
DEFAULT_SAMPLES = 12  # samples per metric a run records
MIN_SAMPLES = 5  # with 4 per side the exact test's smallest p-value is 1/70 > DEFAULT_ALPHA
EXACT_MAX_N = 56  # C(56, 28) < 2**53: every permutation count is an exact float64 integer


@dataclass(frozen=True)
class Comparison:
    """One metric's verdict. The CI is the Hodges-Lehmann CI of the current/baseline shift ratio."""

    metric: str
    direction: Direction
    baseline_median: float
    current_median: float
    ratio: float  # current_median / baseline_median
    change: float  # relative change in the better sense: +0.08 is 8% better, -0.08 is 8% worse
    threshold: float
    p_value: float  # one-sided, in the direction the ranks point (the smaller of the two tails)
    ci_low: float
    ci_high: float
    outcome: MetricOutcome
    n_baseline: int
    n_current: int
    alpha: float = DEFAULT_ALPHA
    min_samples: int = MIN_SAMPLES

    @property
    def ci_level(self) -> float:
        return 1.0 - 2.0 * self.alpha

    def message(self) -> str:
        """One line a person can act on."""
        unit = unit_of(self.metric)
        n = f"n={self.n_baseline}/{self.n_current}"
        if self.outcome is MetricOutcome.INSUFFICIENT:
            return (
                f"{self.metric} NOT JUDGED: too few samples to reach p<{self.alpha:g} ({n}; need >= "
                f"{self.min_samples} on each side, more for a smaller alpha); this is not a pass, record more"
            )
        verb = {
            MetricOutcome.REGRESSION: "regressed",
            MetricOutcome.IMPROVEMENT: "improved",
            MetricOutcome.UNCHANGED: "unchanged",
        }[self.outcome]
        values = f"{_fmt(self.baseline_median, unit)} -> {_fmt(self.current_median, unit)}"
        ci = f"[{_fmt_ratio(self.ci_low)}, {_fmt_ratio(self.ci_high)}]"
        evidence = (
            f"{format_ratio_change(self.ratio)}, threshold {self.threshold:.0%}, p={self.p_value:.2g}, "
            f"{format_level(self.ci_level)} CI of shift ratio {ci}, {n}"
        )
        line = f"{self.metric} {verb}: {values} ({evidence})"
        if self.outcome is MetricOutcome.IMPROVEMENT:
            line += " (refresh the baseline with --update-baselines)"
        elif (
            self.outcome is MetricOutcome.UNCHANGED and abs(self.change) > self.threshold and self.p_value >= self.alpha
        ):
            line += f" (within noise: not significant at alpha={self.alpha:g})"
        return line


def compare_samples(
    metric: str,
    baseline: Sequence[float],
    current: Sequence[float],
    *,
    direction: Direction | None = None,
    threshold: float | None = None,
    alpha: float | None = None,
    min_samples: int = MIN_SAMPLES,
) -> Comparison:
    """Judge ``current`` against ``baseline`` samples of ``metric``.

    The test and its CI are exact: nothing here is random, equal inputs give equal verdicts.
    ``min_samples`` lowers the per-side minimum for a sequentially stopped run
    (`sglperf.baselines.sequential`), whose smaller ``alpha`` the exact test must still reach.
    """
    direction, threshold, alpha = _resolve(metric, direction, threshold, alpha)
    base, cur = _validate(metric, "baseline", baseline), _validate(metric, "current", current)
    m, n = len(base), len(cur)
    base_med = _median(base) if m else math.nan
    cur_med = _median(cur) if n else math.nan
    # In log space: any two finite positive medians have a finite log ratio (1e-300 vs 1e308 too).
    ratio = _exp(math.log(cur_med) - math.log(base_med)) if m and n else math.nan
    sign = 1.0 if direction is Direction.HIGHER_IS_BETTER else -1.0
    change = sign * (ratio - 1.0)
    unjudged = Comparison(
        metric,
        direction,
        base_med,
        cur_med,
        ratio,
        change,
        threshold,
        p_value=math.nan,
        ci_low=math.nan,
        ci_high=math.nan,
        outcome=MetricOutcome.INSUFFICIENT,
        n_baseline=m,
        n_current=n,
        alpha=alpha,
        min_samples=min_samples,
    )
    # Below this the exact test cannot reach alpha at all: judging would be a silent pass.
    if min(m, n) < min_samples or 1.0 / math.comb(m + n, n) >= alpha:
        return unjudged

    log_base, log_cur = np.log(base), np.log(cur)
    p_lower, p_higher = rank_sum_p_values(base, cur)  # raw values: a log could merge adjacent floats
    p_worse, p_better = (p_lower, p_higher) if sign > 0 else (p_higher, p_lower)
    # Log space and a mirrored bound make the decision flip exactly when runs are swapped.
    gain = sign * (math.log(cur_med) - math.log(base_med))
    bound = -math.log1p(-threshold) if sign > 0 else math.log1p(threshold)
    if gain < -bound and p_worse < alpha:
        outcome = MetricOutcome.REGRESSION
    elif gain > bound and p_better < alpha:
        outcome = MetricOutcome.IMPROVEMENT
    else:
        outcome = MetricOutcome.UNCHANGED
    ci_low, ci_high = shift_ratio_ci(log_base, log_cur, alpha)
    return replace(unjudged, p_value=min(p_lower, p_higher), ci_low=ci_low, ci_high=ci_high, outcome=outcome)


def rank_sum_p_values(baseline: np.ndarray, current: np.ndarray) -> tuple[float, float]:
    """One-sided Mann-Whitney p-values: (current tends lower, current tends higher)."""
    m, n = len(baseline), len(current)
    pooled = np.concatenate([baseline, current])
    doubled = _doubled_midranks(pooled)  # integers, so sums and counts stay exact
    observed = int(doubled[m:].sum())
    if m + n <= EXACT_MAX_N:
        sums, counts = _subset_sum_counts(tuple(sorted(doubled.tolist())), n)
        total = math.comb(m + n, n)
        return float(counts[sums <= observed].sum()) / total, float(counts[sums >= observed].sum()) / total
    return _normal_p_values(doubled, observed, m, n)


def shift_ratio_ci(log_baseline: np.ndarray, log_current: np.ndarray, alpha: float) -> tuple[float, float]:
    """Hodges-Lehmann CI (level 1 - 2*alpha) of the multiplicative shift current/baseline."""
    m, n = len(log_baseline), len(log_current)
    diffs = np.sort((log_current[None, :] - log_baseline[:, None]).ravel())
    k = _ci_rank(m, n, alpha)  # the CI is [D_(k), D_(mn+1-k)] of the sorted log ratios, 1-based
    return _exp(diffs[k - 1]), _exp(diffs[m * n - k])


def _exp(log_value: float) -> float:
    """exp, held at the largest finite float instead of overflowing (a ratio beyond 1e308 is not a
    measurement anyone needs told apart)."""
    return math.exp(min(float(log_value), _LOG_MAX_FLOAT))


_LOG_MAX_FLOAT = math.log(sys.float_info.max)


def _median(values: np.ndarray) -> float:
    """The median without numpy's overflow: the two middle values of an even count are averaged as
    low + (high - low) / 2, finite for any finite inputs."""
    ordered = np.sort(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    low, high = float(ordered[mid - 1]), float(ordered[mid])
    return low + (high - low) / 2


def _resolve(
    metric: str, direction: Direction | None, threshold: float | None, alpha: float | None
) -> tuple[Direction, float, float]:
    if direction is None:
        if metric not in METRICS:
            raise ValueError(f"{metric}: unknown metric; pass direction= (one of {sorted(METRICS)} is known)")
        direction = METRICS[metric].direction
    if threshold is None:
        if metric not in METRICS:
            raise ValueError(f"{metric}: no default threshold; pass threshold=")
        threshold = METRICS[metric].default_threshold
    alpha = DEFAULT_ALPHA if alpha is None else alpha
    direction = Direction(direction)
    if not 0.0 <= threshold < direction.threshold_limit:
        raise ValueError(
            f"{metric}: threshold must be a relative change in [0, {direction.threshold_limit:g}) for a metric where "
            f"{direction.value} is better, got {threshold!r}"
        )
    # Above 0.5 both one-sided tails could pass at once.
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"{metric}: alpha must be in (0, 0.5), got {alpha!r}")
    return direction, float(threshold), float(alpha)


def _validate(metric: str, side: str, samples: Sequence[float], *, positive: bool = True) -> np.ndarray:
    """``samples`` as a flat float array, refused in one line naming ``side`` when they are not numbers, not
    finite, or (``positive``: rates and durations) not above zero."""
    try:
        values = np.asarray(samples, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{metric}: {side} samples are not numbers: {exc}") from exc
    if values.ndim != 1:
        raise ValueError(f"{metric}: {side} samples must be a flat sequence, got shape {values.shape}")
    bad = values[~np.isfinite(values) | ((values <= 0) if positive else False)]
    if bad.size:
        # Rates and durations are positive; a zero or NaN is a broken measurement, not a fast one.
        kind = "finite and positive" if positive else "finite"
        raise ValueError(f"{metric}: {side} samples must be {kind}, got {bad[:3].tolist()}")
    return values


def _doubled_midranks(values: np.ndarray) -> np.ndarray:
    """2 x the midranks (1-based), as integers."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], len(values)]  # exclusive
    group_doubled = starts + ends + 1  # (first rank + last rank) for 1-based ranks
    doubled = np.empty(len(values), dtype=np.int64)
    doubled[order] = np.repeat(group_doubled, ends - starts)
    return doubled


@lru_cache(maxsize=256)
def _subset_sum_counts(scores: tuple[int, ...], size: int) -> tuple[np.ndarray, np.ndarray]:
    """How many size-``size`` subsets of ``scores`` reach each sum: (sums, counts)."""
    top = sum(scores)
    table = np.zeros((size + 1, top + 1))  # table[k, s]: k-subsets summing to s
    table[0, 0] = 1.0
    for score in scores:
        table[1:, score:] = table[1:, score:] + table[:-1, : top + 1 - score]
    sums = np.flatnonzero(table[size])
    counts = table[size, sums]
    for cached in (sums, counts):
        cached.setflags(write=False)  # shared by every caller through the cache
    return sums, counts


def _normal_p_values(doubled: np.ndarray, observed: int, m: int, n: int) -> tuple[float, float]:
    big_n = m + n
    u = observed / 2.0 - n * (n + 1) / 2.0
    _, tie_sizes = np.unique(doubled, return_counts=True)
    tie_term = float((tie_sizes**3 - tie_sizes).sum()) / (big_n * (big_n - 1))
    sd = math.sqrt(m * n / 12.0 * (big_n + 1 - tie_term))
    if sd == 0.0:  # every sample identical: no evidence either way
        return 1.0, 1.0
    centred = u - m * n / 2.0
    z_lower, z_higher = (centred + 0.5) / sd, (centred - 0.5) / sd
    return 0.5 * math.erfc(-z_lower / math.sqrt(2)), 0.5 * math.erfc(z_higher / math.sqrt(2))


@lru_cache(maxsize=256)
def _ci_rank(m: int, n: int, alpha: float) -> int:
    """Largest k with P(U <= k - 1) <= alpha under the no-ties null; the caller ensures k >= 1."""
    if m + n <= EXACT_MAX_N:
        sums, counts = _subset_sum_counts(tuple(range(2, 2 * (m + n) + 1, 2)), n)
        u_values = sums // 2 - n * (n + 1) // 2
        cdf = np.cumsum(counts) / math.comb(m + n, n)
        return int(u_values[cdf <= alpha][-1]) + 1
    z = NormalDist().inv_cdf(1.0 - alpha)
    return max(1, math.floor(m * n / 2.0 - z * math.sqrt(m * n * (m + n + 1) / 12.0)))


def _fmt_ratio(ratio: float) -> str:
    return f"{ratio:.3f}" if 1e-3 <= ratio < 1e4 else f"{ratio:.3g}"


def _fmt(value: float, unit: str) -> str:
    if unit == "s" and value < 1.0:
        return f"{value * 1e3:.4g} ms"
    # No exponent for big rates, but no 300-digit number for an absurd one either.
    shown = f"{value:.4g}" if not 1e4 <= abs(value) < 1e15 else f"{value:.0f}"
    return f"{shown} {unit}".rstrip()
