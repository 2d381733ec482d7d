"""Drift across nights: E-divisive change points in a metric's history, and where a slow drift began.

A nightly run compares against a fixed baseline, so a metric that loses 1% a night stays "within
threshold" for three nights and then fails with no hint that it has been sliding for a week. This
module reads the history of a metric's per-night medians (one value per results folder, oldest
first) and names the night the current slide began.

Method: E-divisive means (Matteson & James 2014), as in Hunter/Otava
---------------------------------------------------------------------
For a segment of the series (log values, so a change is relative), every split ``t`` gets the
energy-distance statistic with exponent 1

    Q(t) = (n_l n_r / (n_l + n_r)) * (2 E|x - y| - E|x - x'| - E|y - y'|)

(``x`` left of ``t``, ``y`` right of it, means over distinct pairs). It is zero in expectation when
both sides have one distribution and grows with any difference in it; the split with the largest
``Q`` is the candidate. Significance by permutation: the segment is shuffled ``permutations`` times
(seeded, so a report is reproducible) and the p-value is (1 + #shuffles reaching the observed
maximum) / (1 + permutations), exact under exchangeability whatever the noise distribution.
Significant splits are found one at a time (bisection: the best split over all current segments
is tested, kept if p <= ``alpha``, and the search goes on in the pieces), each segment at least
``min_size`` nights long.

A slow drift is a ramp, not a step: bisection cuts it into a staircase of change points, each step
in the same direction. The drift's start is the first change point of the last run of steps that
all go the worse way (for decode tok/s, down), refined by a least-squares hinge fit (flat, then a
straight line) over the nights around it, since the first step of a staircase lags the ramp's
start by the noise it takes to see it. It is reported when the change from the segment before the
start to the latest segment is worse than the metric's threshold (the same practical floor as the
regression verdict) as well as significant.

Measured (bench/changepoint_quality.py, 30 nights, 2% CV log-normal noise, 500 histories per row):
a 1%/night drift with 10 or more nights behind it is always found and dated within 2 nights of its
start in 86-94% of histories, about as often as an oracle that knows a single ramp exists and fits
its start by least squares over the whole history: in 2% noise the first nights of a 1%/night ramp
are not told from noise much more finely. Flat histories raise a false drift in <= 1% (alpha 0.01
per test, 499 permutations). A drift only a few nights old (< 5% in total) is mostly not reported:
it is inside the noise.

Assumptions: nights are independent given the drift (the same server stack each night); a change
of runner, SGLang version or baseline in the middle of the history is a real step, reported too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sglperf.model.metrics import METRICS, Direction

DEFAULT_ALPHA = 0.01
DEFAULT_PERMUTATIONS = 499
DEFAULT_MIN_SIZE = 3
DEFAULT_SEED = 0
# Fewer nights than this say nothing about a drift: with 10 or fewer, even a clean 20% step halfway
# is not significant at alpha 0.01 with 499 permutations (the permutation p-value cannot get that
# small), so the check would look on and never fire; with 11 the same step is found
# (tests/unit/test_changepoint.py).
MIN_HISTORY = 11
HINGE_WINDOW = 3  # nights after the first change point the hinge fit may still place the start


@dataclass(frozen=True)
class ChangePoint:
    index: int  # first night of the new segment
    p_value: float


@dataclass(frozen=True)
class Drift:
    """A metric getting worse since ``start`` (an index into the history)."""

    metric: str
    start: int
    start_label: str
    change: float  # the metric's relative change: latest segment's median over the median before the start, - 1
    nights: int  # nights since the start, the start included
    change_points: tuple[ChangePoint, ...]

    def message(self) -> str:
        return (
            f"{self.metric} drifting since {self.start_label} ({self.change:+.1%}: the latest nights' median against "
            f"the nights before it; {self.nights} nights)"
        )


def energy_statistic(x: np.ndarray, min_size: int = DEFAULT_MIN_SIZE) -> np.ndarray:
    """Q(t) for every split t in [min_size, n - min_size] (other entries -inf), exponent 1.

    Works on a batch: ``x`` has shape (n,) or (batch, n).
    """
    values = np.atleast_2d(np.asarray(x, dtype=float))
    n = values.shape[1]
    dist = np.abs(values[:, :, None] - values[:, None, :])
    prefix = dist.cumsum(axis=1).cumsum(axis=2)  # prefix[b, i, j] = sum dist[b, :i+1, :j+1]
    out = np.full(values.shape, -np.inf)
    total = prefix[:, -1, -1][:, None]
    t = np.arange(min_size, n - min_size + 1)
    if t.size == 0:
        return out[0] if np.ndim(x) == 1 else out
    left = prefix[:, t - 1, t - 1]  # both orders of every left pair
    cross = prefix[:, t - 1, -1] - left
    right = total - left - 2.0 * cross
    n_l, n_r = t.astype(float), (n - t).astype(float)
    e = 2.0 * cross / (n_l * n_r) - left / (n_l * (n_l - 1)) - right / (n_r * (n_r - 1))
    out[:, t] = n_l * n_r / n * e
    return out[0] if np.ndim(x) == 1 else out


def _best_split(x: np.ndarray, min_size: int) -> tuple[int, float] | None:
    if len(x) < 2 * min_size:
        return None
    q = energy_statistic(x, min_size)
    t = int(np.argmax(q))
    return t, float(q[t])


def _p_value(x: np.ndarray, observed: float, min_size: int, permutations: int, rng: np.random.Generator) -> float:
    shuffled = rng.permuted(np.broadcast_to(x, (permutations, len(x))), axis=1)
    maxima = energy_statistic(shuffled, min_size).max(axis=1)
    return (1 + int(np.sum(maxima >= observed - 1e-12))) / (1 + permutations)


def change_points(
    values: Sequence[float],
    *,
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_size: int = DEFAULT_MIN_SIZE,
    seed: int = DEFAULT_SEED,
) -> list[ChangePoint]:
    """Significant change points of a series by E-divisive bisection, sorted by index."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or not np.all(np.isfinite(x)):
        raise ValueError("change_points needs a flat series of finite numbers")
    rng = np.random.default_rng(seed)
    bounds = [0, len(x)]
    found: list[ChangePoint] = []
    while True:
        best: tuple[float, int, int, int] | None = None  # (Q, split, segment start, segment end)
        for lo, hi in itertools.pairwise(bounds):
            split = _best_split(x[lo:hi], min_size)
            if split is not None and (best is None or split[1] > best[0]):
                best = (split[1], lo + split[0], lo, hi)
        if best is None:
            break
        q, t, lo, hi = best
        p = _p_value(x[lo:hi], q, min_size, permutations, rng)
        if p > alpha:
            break
        found.append(ChangePoint(t, p))
        bounds = sorted([*bounds, t])
    return sorted(found, key=lambda c: c.index)


def hinge_start(y: np.ndarray, lo: int, hi: int) -> int:
    """The start s in [lo, hi] minimising the squared error of: flat before s, a line from s on."""
    n = len(y)
    best, best_sse = lo, math.inf
    t = np.arange(n, dtype=float)
    for s in range(max(lo, 1), min(hi, n - 2) + 1):
        design = np.column_stack([np.ones(n), np.maximum(t - s + 1, 0.0)])  # night s is the first below
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        sse = float(np.sum((y - design @ coef) ** 2))
        if sse < best_sse:
            best, best_sse = s, sse
    return best


def drift(
    metric: str,
    values: Sequence[float],
    labels: Sequence[str],
    *,
    threshold: float | None = None,
    direction: Direction | None = None,
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    min_size: int = DEFAULT_MIN_SIZE,
    seed: int = DEFAULT_SEED,
) -> Drift | None:
    """The drift in ``values`` (per-night medians, oldest first) that is still going on, or None."""
    if len(values) != len(labels):
        raise ValueError(f"{len(values)} values but {len(labels)} labels")
    if len(values) < MIN_HISTORY:
        return None
    known = METRICS.get(metric)
    direction = direction or (known.direction if known else None)
    threshold = threshold if threshold is not None else (known.default_threshold if known else None)
    if direction is None or threshold is None:
        raise ValueError(f"{metric}: unknown metric; pass direction= and threshold=")
    sign = 1.0 if Direction(direction) is Direction.HIGHER_IS_BETTER else -1.0
    x = np.asarray(values, dtype=float)
    if np.any(x <= 0):
        raise ValueError(f"{metric}: history values must be positive")
    gain = sign * np.log(x)  # up is better
    points = change_points(gain, alpha=alpha, permutations=permutations, min_size=min_size, seed=seed)
    if not points:
        return None
    edges = [0, *(c.index for c in points), len(x)]
    medians = [float(np.median(gain[a:b])) for a, b in itertools.pairwise(edges)]
    # The last run of steps that all go the worse way, ending in the latest segment; segment k is
    # the plateau before it (change point j separates segments j and j + 1).
    k = len(medians) - 1
    while k > 0 and medians[k] < medians[k - 1]:
        k -= 1
    if k == len(medians) - 1:
        return None  # the latest segment is no worse than the one before it
    run = points[k:]
    # The hinge fit sees the plateau and everything after it; the first step lags the ramp's start.
    origin = edges[k]
    start = origin + hinge_start(gain[origin:], 1, run[0].index - origin + HINGE_WINDOW)
    before = float(np.median(gain[origin:start]))
    bound = -math.log1p(-threshold) if sign > 0 else math.log1p(threshold)
    if medians[-1] - before > -bound:
        return None  # significant, but smaller than the metric's threshold
    change = math.expm1(sign * (medians[-1] - before))  # the metric's own relative change
    return Drift(metric, start, labels[start], change, len(x) - start, tuple(run))
