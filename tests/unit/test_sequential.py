"""Sequential stopping: the plan's invariants, its calibration, and its error rates in small."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglperf.baselines import stats
from sglperf.baselines.sequential import SequentialPlan, SequentialPlanError, calibrated_levels
from sglperf.model.metrics import Direction, MetricOutcome

pytestmark = pytest.mark.selftest

PLAN = SequentialPlan()
BOTH_SIDES = SequentialPlan(rule_out_improvements=True)  # the rule before: "clearly within" both bounds
FLIPPED = {
    MetricOutcome.REGRESSION: MetricOutcome.IMPROVEMENT,
    MetricOutcome.IMPROVEMENT: MetricOutcome.REGRESSION,
    MetricOutcome.UNCHANGED: MetricOutcome.UNCHANGED,
    MetricOutcome.INSUFFICIENT: MetricOutcome.INSUFFICIENT,
    None: None,
}
# Rounds on a 0.001 grid around 1 (+-6%), shifted by a factor: regressions, improvements, both.
rounds = st.lists(st.integers(940, 1060), min_size=1, max_size=14).map(lambda xs: [x / 1000 for x in xs])
baselines = st.lists(st.integers(940, 1060), min_size=8, max_size=14).map(lambda xs: [x / 1000 for x in xs])
shifts = st.sampled_from([0.9, 0.95, 0.97, 1.0, 1.03, 1.05, 1.1])
fast = settings(max_examples=120, deadline=None)


def _lognormal(rng: np.random.Generator, cv: float, n: int) -> np.ndarray:
    sigma = math.sqrt(math.log1p(cv**2))
    return np.exp(rng.normal(-(sigma**2) / 2, sigma, n))


@fast
@given(baselines, rounds, shifts)
def test_never_stops_before_the_minimum_and_always_by_the_maximum(
    base: list[float], cur: list[float], k: float
) -> None:
    current = [x * k for x in cur]
    decision = PLAN.decide("decode_tok_s", base, current)
    if len(current) < PLAN.min_rounds:
        assert not decision.stop and decision.outcome is None
    if len(current) >= PLAN.max_rounds:
        assert decision.stop and decision.outcome is not None


@fast
@given(baselines, rounds, shifts)
def test_a_stopped_run_gets_the_fixed_rule_at_the_plan_level(base: list[float], cur: list[float], k: float) -> None:
    current = [x * k for x in cur]
    decision = PLAN.decide("decode_tok_s", base, current)
    if decision.stop:
        assert decision.outcome is PLAN.judge("decode_tok_s", base, current).outcome
        judged = stats.compare_samples(
            "decode_tok_s",
            base,
            current,
            alpha=PLAN.nominal_alpha(len(base), len(current)),
            min_samples=PLAN.min_rounds,
        )
        assert decision.outcome is judged.outcome


@fast
@given(baselines, rounds, shifts)
def test_symmetric_reading_a_metric_the_other_way_round_flips_the_verdict(
    base: list[float], cur: list[float], k: float
) -> None:
    current = [x * k for x in cur]
    # A threshold no ratio of grid values hits exactly (a tie with the bound could fall either way by
    # an ulp); the mirrored bound in log space: a drop of t for throughput is a 1/(1-t) rise for latency.
    t = 0.0301234567
    rise = 1 / (1 - t) - 1
    # Ruling out both sides, stopping is symmetric too; the default plan asks the improvement side less
    # (only while the median shows one), so only its verdicts mirror.
    higher = BOTH_SIDES.decide("decode_tok_s", base, current, threshold=t, direction=Direction.HIGHER_IS_BETTER)
    lower = BOTH_SIDES.decide("decode_tok_s", base, current, threshold=rise, direction=Direction.LOWER_IS_BETTER)
    assert higher.stop == lower.stop
    assert FLIPPED[higher.outcome] is lower.outcome
    up = PLAN.judge("decode_tok_s", base, current, threshold=t, direction=Direction.HIGHER_IS_BETTER)
    down = PLAN.judge("decode_tok_s", base, current, threshold=rise, direction=Direction.LOWER_IS_BETTER)
    assert FLIPPED[up.outcome] is down.outcome


@fast
@given(baselines, rounds, shifts, st.sampled_from(list(Direction)))
def test_the_plan_stops_whenever_ruling_out_both_sides_would_with_the_same_verdict(
    base: list[float], cur: list[float], k: float, direction: Direction
) -> None:
    current = [x * k for x in cur]
    both = BOTH_SIDES.decide("decode_tok_s", base, current, direction=direction)
    plan = PLAN.decide("decode_tok_s", base, current, direction=direction)
    if both.stop:
        assert plan.stop and plan.outcome is both.outcome


@fast
@given(baselines, rounds, shifts, st.sampled_from([0.25, 2.0, 1024.0]))
def test_scale_invariant(base: list[float], cur: list[float], k: float, unit: float) -> None:
    current = [x * k for x in cur]
    t = 0.0501234567  # off the grid's ratios, as above
    a = PLAN.decide("ttft_s", base, current, threshold=t)
    b = PLAN.decide("ttft_s", [x * unit for x in base], [x * unit for x in current], threshold=t)
    assert (a.stop, a.outcome) == (b.stop, b.outcome)


def test_calibrated_levels_hold_alpha_over_all_looks() -> None:
    """Independent check of the calibration with the production rank test on normal data."""
    interim, final = calibrated_levels(12, 3, 12, 0.01)
    assert 1 / 455 <= interim <= final < 0.01  # 3 rounds can reach it (1/455), both below the fixed alpha
    rng = np.random.default_rng(1)
    paths, hits = 3000, 0
    for _ in range(paths):
        base, cur = rng.normal(size=12), rng.normal(size=12)
        p = [stats.rank_sum_p_values(base, cur[:n])[0] for n in range(3, 13)]
        hits += min(p[:-1]) <= interim or p[-1] <= final
    assert hits / paths <= 0.01 + 3 * math.sqrt(0.01 * 0.99 / paths)
    assert PLAN.nominal_alpha(12) == interim and PLAN.nominal_alpha(12, 12) == final


def test_plan_validation() -> None:
    # Its own class, so that a measurement says "no sequential plan" for these and a bug stays a bug.
    with pytest.raises(SequentialPlanError, match="min_rounds"):
        SequentialPlan(min_rounds=1)
    with pytest.raises(SequentialPlanError, match="max_rounds"):
        SequentialPlan(min_rounds=5, max_rounds=4)
    with pytest.raises(SequentialPlanError, match="futility"):
        SequentialPlan(futility=0.7)
    with pytest.raises(SequentialPlanError, match="no baseline rounds"):
        SequentialPlan().nominal_alpha(0)


def test_clear_cases_stop_early_and_unclear_ones_run_on() -> None:
    rng = np.random.default_rng(3)
    base = (100 * _lognormal(rng, 0.01, 12)).tolist()
    same = (100 * _lognormal(rng, 0.01, 12)).tolist()
    assert PLAN.decide("decode_tok_s", base, same[:3]).outcome is MetricOutcome.UNCHANGED
    dropped = (90 * _lognormal(rng, 0.01, 12)).tolist()
    first = PLAN.decide("decode_tok_s", base, dropped[:3])
    assert first.stop and first.outcome is MetricOutcome.REGRESSION
    # On the threshold (median ratio 0.9725): neither clearly beyond it nor clearly not regressed.
    even = np.linspace(99, 101, 12).tolist()
    assert not PLAN.decide("decode_tok_s", even, [97.0, 97.4, 97.2, 97.3]).stop


# Lower is better, 5% threshold: rounds spread +-6% around 10 (a noisy TTFT, as at concurrency 8).
NOISY_TTFT = np.linspace(9.4, 10.6, 12).round(2).tolist()


def test_an_improvement_the_median_does_not_show_does_not_hold_the_run_open() -> None:
    # 4% faster: clearly not regressed, the median within the 5% threshold; an improvement past it is
    # not ruled out at 3 rounds, and at this spread would not be for many more.
    current = [9.5, 9.6, 9.9]
    decision = PLAN.decide("ttft_s", NOISY_TTFT, current)
    assert decision.stop and decision.outcome is MetricOutcome.UNCHANGED
    assert decision.reason == "ttft_s clearly not regressed after 3 rounds (median -4.0%)"
    assert PLAN.judge("ttft_s", NOISY_TTFT, current).outcome is MetricOutcome.UNCHANGED
    waiting = BOTH_SIDES.decide("ttft_s", NOISY_TTFT, current)
    assert not waiting.stop and "an improvement up to 7.5% not ruled out" in waiting.reason
    # With the median past the improvement bound (6% faster) an improvement is pending: go on.
    pending = PLAN.decide("ttft_s", NOISY_TTFT, [9.2, 9.4, 9.6])
    assert not pending.stop
    assert "median -6.0%, past its improvement bound, p=0.011 not yet under 0.0023" in pending.reason


def test_an_unclear_metric_says_why() -> None:
    rng = np.random.default_rng(4)
    base = (100 * _lognormal(rng, 0.03, 12)).round(2).tolist()
    current = (98 * _lognormal(rng, 0.03, 12)).round(2).tolist()
    interim = PLAN.decide("decode_tok_s", base, current[:6])
    assert not interim.stop and interim.reason.startswith("decode_tok_s not yet clear after 6 rounds: median ")
    last = PLAN.decide("decode_tok_s", base, current)
    assert last.stop and last.outcome is MetricOutcome.UNCHANGED
    assert last.reason == (
        "decode_tok_s not clear after 12 rounds: median -2.9%, a regression up to 4.6% not ruled out (95% bound), "
        "threshold 3%; its rounds vary 3.3% (budget of 12 rounds used)"
    )
    # The run's line names the metric that held it open, not the settled ones.
    settled = (100 * _lognormal(rng, 0.005, 12)).tolist()
    both = PLAN.decide_all(
        {"decode_tok_s": base, "ttft_s": settled}, {"decode_tok_s": current[:6], "ttft_s": settled[:6]}
    )
    assert not both.stop and both.reason == interim.reason


def test_decide_all_waits_for_every_watched_metric() -> None:
    rng = np.random.default_rng(4)
    base = {"decode_tok_s": list(100 * _lognormal(rng, 0.01, 12)), "ttft_s": list(_lognormal(rng, 0.08, 12))}
    current = {"decode_tok_s": list(100 * _lognormal(rng, 0.01, 3)), "ttft_s": list(_lognormal(rng, 0.08, 3))}
    waiting = PLAN.decide_all(base, current)
    assert not waiting.stop and "ttft_s" in waiting.reason  # decode is clear, noisy TTFT is not
    current["decode_tok_s"] = [x * 0.8 for x in current["decode_tok_s"]]
    assert not PLAN.decide_all(base, current).stop  # decode regressed, TTFT still unclear: go on
    settled = PLAN.decide_all(base, {**current, "ttft_s": list(_lognormal(rng, 0.08, 12))})
    assert settled.stop and settled.outcome is MetricOutcome.REGRESSION
    only_decode = SequentialPlan(metrics=("decode_tok_s",)).decide_all(base, current)
    assert only_decode.stop and only_decode.outcome is MetricOutcome.REGRESSION
    # Nothing watched on both sides (an old baseline, a metric skipped): the full budget.
    assert not PLAN.decide_all({"e2e_s": [1.0] * 12}, current).stop
    assert PLAN.decide_all({}, {"decode_tok_s": [1.0] * 12}).stop


def test_error_rates_and_rounds_in_small() -> None:
    """bench/sequential_quality.py in miniature: 2% CV, 3% threshold."""
    rng = np.random.default_rng(0)

    def run(drop: float) -> tuple[float, float]:
        hits, used = 0, []
        for _ in range(150):
            base = (100 * _lognormal(rng, 0.02, 12)).tolist()
            cur = (100 * (1 - drop) * _lognormal(rng, 0.02, 12)).tolist()
            for n in range(1, 13):
                decision = PLAN.decide("decode_tok_s", base, cur[:n])
                if decision.stop:
                    break
            hits += decision.outcome is MetricOutcome.REGRESSION
            used.append(n)
        return hits / 150, float(np.median(used))

    false_alarms, rounds_same = run(0.0)
    detected, rounds_drop = run(0.05)
    assert false_alarms <= 0.03 and detected >= 0.9
    assert rounds_same <= 4 and rounds_drop <= 4
