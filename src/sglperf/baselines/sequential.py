"""Sequential stopping: measure rounds only until a metric's verdict against its baseline is clear.

The fixed design (`sglperf.baselines.stats`) measures 12 rounds and then judges. Most runs do not
need them: an unchanged server is usually clearly not regressed after three or four rounds, and a
5% drop is usually clearly beyond it just as soon. This module decides, after every round,
whether to stop, holding the fixed design's error rates.

The design: a repeated rank test with a calibrated constant level, plus "not regressed" stops
--------------------------------------------------------------------------------------------
The baseline is fixed (``m`` stored rounds, 12 by default); the current run adds one round per look.
At every look ``n`` from ``min_rounds`` (3) to ``max_rounds`` (the workload's ``repeats``):

1. **Verdict**: the fixed design's own rule, `stats.compare_samples`, at the plan's *nominal* level
   ``a`` instead of ``alpha`` (``a_I`` at interim looks, a larger ``a_K`` at the last): a regression
   needs the median to have moved the wrong way by more than the threshold AND the one-sided
   Mann-Whitney p-value to be below ``a``. A regression or an improvement settles the metric.
2. **Clearly not regressed** (stops the run as UNCHANGED): the shift is shown to be better than the
   regression bound by an exact one-sided rank test of the log samples shifted by the bound (the
   test of "the ratio is exactly at the bound", a location shift in log space), at level
   ``futility`` (5%) per look, AND no improvement is pending: the median is not past the
   improvement bound, or, when it is, the mirror test shows the gain smaller than that bound.
3. At ``max_rounds`` the verdict of step 1 is final, whatever it is. A measurement stops when every
   watched metric has settled (`SequentialPlan.decide_all`).

Whenever the run stops, its verdict is exactly ``compare_samples(..., alpha=a, min_samples=
min_rounds)`` on the rounds measured: the report and the regression check use that call.

Why the false-alarm rate is held, at any noise level and shape
--------------------------------------------------------------
With no change, baseline and current rounds are exchangeable, so the ranks at every look, and the
whole path of p-values across looks, have one distribution whatever the noise (log-normal, heavy
tailed, any CV): the permutation null. ``a_I`` is the largest level for which that null crosses
``p <= a_I`` at any look with probability <= 90% of ``alpha``; ``a_K`` is then the largest level for
the last look that keeps "some interim look has p <= a_I, or the last has p <= a_K" at <= ``alpha``
(1%). Both come from a seeded Monte Carlo of the exact permutation null (200 000 paths, two standard
errors of margin), once per (baseline size, looks, alpha). The verdict at the stopping round is a
regression only if that round's p is under its level, so the false-alarm rate is <= ``alpha`` for
ANY stopping rule, the "not regressed" stops included; the threshold only lowers it further. This
is a group-sequential design with a Pocock-type constant interim boundary and a larger final one,
exact for rank statistics. For m=12 and looks 3..12: ``a_I`` = 0.0023 (at 3 rounds a regression
needs every current round below every baseline round, p = 1/455) and ``a_K`` = 0.0049 at 12 rounds
instead of 0.01 (independently checked with the production rank test on normal data).

Why detection is held
---------------------
A missed 5% drop needs either the "not regressed" test to pass, i.e. to show the drop smaller than
3% while it is 5% (at 2% CV a 4.5 standard-error event at 3 rounds, rarer later), or the final look
to miss. A Pocock level costs little power here because the threshold, not the p-value, is the
binding condition at <= 2% CV: a 5% drop at 3 rounds already has p near its floor.

Alternatives rejected
---------------------
* **A fixed number of fewer rounds** (e.g. 4): at 4 rounds a 5% drop is caught ~85% of the time at
  2% CV, under the 95% target; sequential stopping spends rounds only where the verdict is unclear
  (changes near the threshold), so the median falls and the detection rate does not.
* **Wald's SPRT / a mixture SPRT on log ratios**: optimal expected sample size for a known variance,
  but the noise variance is unknown and must be estimated from a dozen rounds, the log-likelihood
  ratio is not robust to one stalled round (a x0.7 sample moves a 3-round mean by 10%), and its
  error bounds hold only under the assumed noise model. The rank path is exact and distribution-free.
* **A single constant level for every look** (Pocock): 0.0028 at the last look too; on a noisy
  runner (6% CV under CPU contention) that lost an 8% decode drop the fixed design caught.
* **Alpha spending with Bonferroni over looks** (e.g. 0.001 per look): exact without Monte Carlo,
  but at 3 rounds against 12 the smallest attainable p is 1/455 = 0.0022, so no run could stop there;
  the looks are highly correlated and the calibrated constant gets 4x the level for the same 1%.
* **Stopping only on "clearly regressed"**: an unchanged server would then always run the full 12
  rounds; the "not regressed" stop is what cuts the median for the common case.
* **"Clearly within" both bounds** (``rule_out_improvements``, the rule until the c=8 finding below):
  an unchanged metric also waited until an improvement past its threshold was ruled out, even with
  its median showing none. The gate asks "regressed?"; that wait bought nothing for it, and it is
  what held concurrency-8 runs to the full budget (below). It reported more small improvements.

Why an unchanged run at concurrency 8 used to run all 12 rounds
----------------------------------------------------------------
bench/sequential_concurrency.py (emulator, 2% step noise, MTP, 4 prompts x 256 tokens, six sessions
per concurrency, every ordered pair replayed as baseline and unchanged run; docs/benchmarks.md). The
metric that does not settle at c > 1 is TTFT: the requests of a round start together, so each
round's mean TTFT carries the client's and the server's set-up of the burst (a few ms on a 2-CPU box,
now and then one request of the round delayed by far more, more so when the box is busy), and the
sessions' medians sit a few % apart. On a busy box its rounds varied 9.7% at c=8 (3.2% at c=1), and
with "clearly within" 4 of 30 c=8 pairs stopped early, TTFT pending in 29. "Within" needs the rounds'
spread well under the threshold (a one-sided 95% bound at 12 rounds against 12 sits ~0.7 CV from
the median), so at a 5% threshold neither side could be shown, and the improvement side, which the
gate never needed, held runs as often as the regression side. Asking the improvement side only while
the median shows an improvement: 17 of 30 stop early (median 9.5 rounds, 12 before), on a quieter run
26 of 30 (21 before); c=1 25 of 30 (14 and 20 before). Pairs that still use the budget are those whose
regression side cannot be shown: the decision's reason says so, naming the metric, its median, the
regression it cannot rule out (the one-sided Hodges-Lehmann bound the test inverts) and how much its
rounds vary. Per-round mean TTFT at c > 1 stays a noisy gate on a small box; a per-round median,
robust to the one delayed request of a burst, would be the fix in what is fed to the plan, at the
price of a new baseline definition. What the change costs: improvements are reported less often
(decode +5% at 2% CV: 86% instead of 99%, +3%: 32% instead of 54%; at 5% CV little changes); the
regression verdicts and error rates are unchanged (bench/sequential_quality.py gives the same rates
to the digit).

Measured (bench/sequential_quality.py, log-normal noise, decode_tok_s, 3% threshold, 2000 trials per
cell): at 2% CV false alarms 0.55% (target <= 1%; the fixed design: 0.01%), a 5% drop caught 99.4%
(target >= 95%; fixed: 98.6%), median rounds 3 with no change (p90 6) and 3 with a 5% drop (12 before); a
drop at the 3% threshold takes the longest (median 8), as it should. At 5% CV, where the threshold no
longer filters, false alarms sit at the bound (1.1% +- 0.2% over 8000 trials; the calibrated bound,
checked on 40 000 null paths: 0.93%), runs use all 12 rounds and a 5% drop is caught 40% (fixed: 46%).
One stalled round (x0.7) among the first three: 1.25% false alarms at 2% CV (fixed: 0.15%), because
an early look sees it at weight 1/3. Trade-offs:

* ``min_rounds`` 3: two rounds cannot reach any useful level against 12 (p >= 1/91) and would leave
  the other metrics, judged on the same rounds, with two samples; 4 costs a round for nothing at <=
  2% CV.
* ``futility`` 5%: looser stops "unchanged" earlier but misses more drops just past the threshold
  (at 2% CV a 5% drop is still caught >= 97%); stricter runs longer on unchanged servers.
* Metrics with more noise (TTFT at 5% CV) settle later: the run stops only when every watched metric
  has settled (a regression included, so a failure names every metric that moved), so a noisy
  watched metric keeps the full budget if it needs it.
* The model assumes independent rounds; rounds from one server session can share a slow state, which
  the threshold (not the p-value) guards, as in the fixed design.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sglperf.baselines import stats
from sglperf.errors import SglperfError
from sglperf.model.metrics import METRICS, Direction, MetricOutcome


class SequentialPlanError(SglperfError, ValueError):
    """A sequential plan that cannot be made: its settings, or no per-look level holds its alpha."""


DEFAULT_MIN_ROUNDS = 3
DEFAULT_FUTILITY = 0.05  # per-look level of the "not regressed" (and improvement-side) tests
# Watched: the run stops when each of these that both sides have is settled (or one regressed).
DEFAULT_METRICS = ("decode_tok_s", "ttft_s", "accept_length")
CALIBRATION_PATHS = 200_000
CALIBRATION_SEED = 20240607
_CHUNK = 20_000


@dataclass(frozen=True)
class Decision:
    """After a round: stop or go on, and the verdict if stopped."""

    stop: bool
    outcome: MetricOutcome | None  # the verdict when stopped (compare_samples at the plan's level)
    reason: str
    rounds: int  # current rounds seen


@dataclass(frozen=True)
class SequentialPlan:
    """When to stop measuring; see the module docstring for the design and its error rates."""

    min_rounds: int = DEFAULT_MIN_ROUNDS
    max_rounds: int = stats.DEFAULT_SAMPLES
    alpha: float = stats.DEFAULT_ALPHA  # false alarms over all looks, per metric
    futility: float = DEFAULT_FUTILITY
    metrics: tuple[str, ...] = DEFAULT_METRICS
    # Wait until an improvement past the threshold is ruled out even when the median shows none (the
    # rule before, "clearly within"). Off: for a metric whose rounds vary about as much as its threshold
    # (TTFT at concurrency 8) that wait held whole budgets, and the gate never needed it (module docstring).
    rule_out_improvements: bool = False

    def __post_init__(self) -> None:
        if self.min_rounds < 2:
            raise SequentialPlanError(f"min_rounds must be >= 2, got {self.min_rounds}")
        if self.max_rounds < self.min_rounds:
            raise SequentialPlanError(f"max_rounds ({self.max_rounds}) must be >= min_rounds ({self.min_rounds})")
        if not 0.0 < self.alpha < 0.5:
            raise SequentialPlanError(f"alpha must be in (0, 0.5), got {self.alpha!r}")
        if not 0.0 < self.futility < 0.5:
            raise SequentialPlanError(f"futility must be in (0, 0.5), got {self.futility!r}")

    def nominal_alpha(self, n_baseline: int, rounds: int | None = None) -> float:
        """The level a look after ``rounds`` rounds is judged at (interim looks, or the last one), such
        that ``alpha`` holds over all looks against ``n_baseline`` rounds."""
        interim, final = calibrated_levels(n_baseline, self.min_rounds, self.max_rounds, self.alpha)
        return final if rounds is not None and rounds >= self.max_rounds else interim

    def judge(
        self,
        metric: str,
        baseline: Sequence[float],
        current: Sequence[float],
        *,
        threshold: float | None = None,
        direction: Direction | None = None,
    ) -> stats.Comparison:
        """The verdict a run stopped here gets: the fixed rule at the plan's nominal level.

        Against a baseline too small for any level to hold ``alpha`` over the looks, NOT JUDGED.
        """
        try:
            level, least = self.nominal_alpha(len(baseline), len(current)), self.min_rounds
        except SequentialPlanError:
            level, least = self.alpha, max(len(baseline), len(current)) + 1  # INSUFFICIENT, never a silent pass
        return stats.compare_samples(
            metric,
            baseline,
            current,
            direction=direction,
            threshold=threshold,
            alpha=level,
            min_samples=least,
        )

    def decide(
        self,
        metric: str,
        baseline: Sequence[float],
        current: Sequence[float],
        *,
        threshold: float | None = None,
        direction: Direction | None = None,
    ) -> Decision:
        """Stop after ``len(current)`` rounds of ``metric``, or measure another?"""
        n = len(current)
        if n < self.min_rounds:
            return Decision(False, None, f"{n} of at least {self.min_rounds} rounds", n)
        verdict = self.judge(metric, baseline, current, threshold=threshold, direction=direction)
        outcome = verdict.outcome
        if outcome in (MetricOutcome.REGRESSION, MetricOutcome.IMPROVEMENT):
            return Decision(True, outcome, f"{metric} clearly {outcome.value} after {n} rounds", n)
        if outcome is MetricOutcome.UNCHANGED:
            unsettled = self._unsettled(verdict, baseline, current)
            if not unsettled:
                settled = f"{metric} clearly not regressed after {n} rounds (median {verdict.ratio - 1:+.1%})"
                return Decision(True, outcome, settled, n)
            why = f"{metric} not {'yet ' if n < self.max_rounds else ''}clear after {n} rounds: {unsettled}"
        else:  # INSUFFICIENT: no level holds alpha against this baseline, no round will change that
            why = f"{metric} cannot be judged against {len(baseline)} baseline rounds"
        if n >= self.max_rounds:
            return Decision(True, outcome, f"{why} (budget of {self.max_rounds} rounds used)", n)
        return Decision(False, None, why, n)

    def _unsettled(self, verdict: stats.Comparison, baseline: Sequence[float], current: Sequence[float]) -> str:
        """Why an UNCHANGED metric is not settled yet, or "" when it is (see the module docstring):

        * regression side: the one-sided test "the shift is exactly at the regression bound" is not
          rejected at level ``futility``;
        * improvement side: the median is past the improvement bound (the practical half of an
          IMPROVEMENT holds, the statistical half not yet) and the mirror test is not rejected either.
          With ``rule_out_improvements``, whatever the median (the rule before, "clearly within").

        The reason quotes the regression bound the test inverts (Hodges-Lehmann, one-sided at ``1 -
        futility``) and the rounds' spread, the usual cause of an unclear metric."""
        sign = 1.0 if verdict.direction is Direction.HIGHER_IS_BETTER else -1.0
        bound = -math.log1p(-verdict.threshold) if sign > 0 else math.log1p(verdict.threshold)
        log_base, log_cur = np.log(np.asarray(baseline, dtype=float)), np.log(np.asarray(current, dtype=float))
        gain_base, gain_cur = sign * log_base, sign * log_cur
        # Current moved up to the regression bound still tends higher: the drop is smaller than the bound.
        worse = stats.rank_sum_p_values(gain_base, gain_cur + bound)[1] >= self.futility
        # Current moved down to the improvement bound still tends lower: the gain is smaller than it.
        improved = sign * math.log(verdict.ratio) > bound
        better = (improved or self.rule_out_improvements) and (
            stats.rank_sum_p_values(gain_base, gain_cur - bound)[0] >= self.futility
        )
        if not (worse or better):
            return ""
        low, high = stats.shift_ratio_ci(log_base, log_cur, self.futility)  # each side one-sided at 1 - futility
        whys = []
        if worse:
            # With ties the bound and the test can disagree by a rank: never print a negative regression.
            worst = max(1.0 - low if sign > 0 else high - 1.0, 0.0)
            whys.append(f"a regression up to {worst:.1%} not ruled out ({1 - self.futility:.0%} bound)")
        if better and improved:
            whys.append(f"past its improvement bound, p={verdict.p_value:.2g} not yet under {verdict.alpha:.2g}")
        elif better:
            best = max(high - 1.0 if sign > 0 else 1.0 - low, 0.0)
            whys.append(f"an improvement up to {best:.1%} not ruled out ({1 - self.futility:.0%} bound)")
        return (
            f"median {verdict.ratio - 1:+.1%}, {' and '.join(whys)}, threshold {verdict.threshold:.0%}; "
            f"its rounds vary {_spread(log_base, log_cur):.1%}"
        )

    def decide_all(
        self,
        baseline: Mapping[str, Sequence[float]],
        current: Mapping[str, Sequence[float]],
        thresholds: Mapping[str, float] | None = None,
        skip: Sequence[str] = (),
    ) -> Decision:
        """One decision for a measurement: stop when every watched metric both sides have is settled
        (regressed, improved, or clearly not regressed). A regression alone does not stop the
        run while another watched metric is unclear: the failure should name everything that moved
        (a slower decode step also shows in TTFT). Without any such metric, measure the whole budget."""
        thresholds = thresholds or {}
        rounds = max((len(v) for v in current.values()), default=0)
        watched = [m for m in self.metrics if m in baseline and m in current and m not in skip and m in METRICS]
        if not watched:
            stop = rounds >= self.max_rounds
            return Decision(stop, None, "no watched metric has a baseline: full budget", rounds)
        decisions = {m: self.decide(m, baseline[m], current[m], threshold=thresholds.get(m)) for m in watched}
        pending = [m for m, d in decisions.items() if not d.stop]
        if pending and rounds < self.max_rounds:
            return Decision(False, None, "; ".join(decisions[m].reason for m in pending), rounds)
        outcome = MetricOutcome.UNCHANGED
        if any(d.outcome is MetricOutcome.IMPROVEMENT for d in decisions.values()):
            outcome = MetricOutcome.IMPROVEMENT
        if any(d.outcome is MetricOutcome.INSUFFICIENT for d in decisions.values()):
            outcome = MetricOutcome.INSUFFICIENT
        if any(d.outcome is MetricOutcome.REGRESSION for d in decisions.values()):
            outcome = MetricOutcome.REGRESSION
        return Decision(True, outcome, "; ".join(d.reason for d in decisions.values()), rounds)


INTERIM_SHARE = 0.9  # of alpha, for the interim looks' constant level; the last look gets the rest


@lru_cache(maxsize=64)
def calibrated_levels(n_baseline: int, min_rounds: int, max_rounds: int, alpha: float) -> tuple[float, float]:
    """(interim level, last-look level) with P(some look has p <= its level) <= alpha under no change.

    The interim level is the largest attainable constant level holding ``INTERIM_SHARE * alpha`` over
    every look; the last look then gets the largest attainable level that keeps the whole path under
    ``alpha``. Rank statistics under no change follow the permutation null whatever the noise, so
    uniform draws simulate it exactly; the Monte Carlo is seeded (the levels are constants of the
    plan) and keeps two standard errors of margin.
    """
    if n_baseline < 1:
        raise SequentialPlanError(f"no baseline rounds to calibrate against ({n_baseline})")
    looks = range(min_rounds, max_rounds + 1)
    cdfs = {n: _lower_cdf(n_baseline, n) for n in looks}
    rng = np.random.default_rng(CALIBRATION_SEED)
    interim_min, last_p = [], []
    for start in range(0, CALIBRATION_PATHS, _CHUNK):
        size = min(_CHUNK, CALIBRATION_PATHS - start)
        base = rng.random((size, n_baseline))
        cur = rng.random((size, max_rounds))
        placements = (cur[:, :, None] > base[:, None, :]).sum(axis=2)  # baseline rounds below each current
        u = np.cumsum(placements, axis=1)
        best = np.ones(size)
        for n in looks[:-1]:
            best = np.minimum(best, cdfs[n][u[:, n - 1]])
        interim_min.append(best)
        last_p.append(cdfs[max_rounds][u[:, max_rounds - 1]])
    interim_p, final_p = np.concatenate(interim_min), np.concatenate(last_p)
    candidates = np.unique(np.concatenate(list(cdfs.values())))

    def largest(rate_of: Callable[[float], float], target: float) -> float:
        level = 0.0
        for a in candidates:  # ascending: keep the largest level whose path-wise rate stays under target
            rate = rate_of(float(a))
            if rate + 2.0 * math.sqrt(max(rate * (1 - rate), 1e-12) / len(interim_p)) > target:
                break
            level = float(a)
        return level

    interim = largest(lambda a: float(np.mean(np.minimum(interim_p, final_p) <= a)), INTERIM_SHARE * alpha)
    final = largest(lambda a: float(np.mean((interim_p <= interim) | (final_p <= a))), alpha)
    if interim == 0.0 or final == 0.0:
        raise SequentialPlanError(
            f"no per-look level holds alpha={alpha:g} over looks {min_rounds}..{max_rounds} against "
            f"{n_baseline} baseline rounds: raise min_rounds or the baseline's rounds"
        )
    return interim, max(final, interim)


def _spread(log_base: np.ndarray, log_cur: np.ndarray) -> float:
    """The rounds' relative spread (a CV, ~ the standard deviation of the logs), pooled over both sides
    around each side's own mean, so a shift between them does not count as spread."""
    dof = len(log_base) + len(log_cur) - 2
    if dof < 1:
        return math.nan
    squares = float(((log_base - log_base.mean()) ** 2).sum() + ((log_cur - log_cur.mean()) ** 2).sum())
    return math.sqrt(squares / dof)


def _lower_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u) for u = 0..m*n: U counts (baseline, current) pairs with current above, no ties."""
    sums, counts = stats._subset_sum_counts(tuple(range(2, 2 * (m + n) + 1, 2)), n)
    u = sums // 2 - n * (n + 1) // 2
    pmf = np.zeros(m * n + 1)
    pmf[u] = counts
    return np.cumsum(pmf) / math.comb(m + n, n)
