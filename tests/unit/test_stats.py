"""The regression comparator: exact rank test, decision rule, messages, and its invariants."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglperf.baselines.stats import (
    DEFAULT_SAMPLES,
    EXACT_MAX_N,
    MIN_SAMPLES,
    rank_sum_p_values,
)
from sglperf.baselines.stats import compare_samples as compare
from sglperf.model.metrics import METRICS, Direction, MetricOutcome
from sglperf.model.metrics import MetricOutcome as Outcome

pytestmark = pytest.mark.selftest

FLIPPED = {
    Outcome.REGRESSION: Outcome.IMPROVEMENT,
    Outcome.IMPROVEMENT: Outcome.REGRESSION,
    Outcome.UNCHANGED: Outcome.UNCHANGED,
}

# Samples on a 0.01 grid: real timings are never one ulp apart, and a grid keeps
# distinct values distinct after rescaling, which the scale test relies on.
samples = st.lists(st.integers(1, 10**6), min_size=MIN_SAMPLES, max_size=20).map(lambda xs: [x / 100 for x in xs])
# Noise within +-3% around 1, times a shift factor: regressions and improvements both show up.
noisy = st.lists(st.integers(970, 1030), min_size=MIN_SAMPLES, max_size=16).map(lambda xs: [x / 1000 for x in xs])
metrics = st.sampled_from(sorted(METRICS))
fast = settings(max_examples=150, deadline=None)


def lognormal(rng: np.random.Generator, cv: float, n: int = DEFAULT_SAMPLES, value: float = 70.0) -> list[float]:
    sigma = math.sqrt(math.log1p(cv**2))
    samples: list[float] = (value * np.exp(rng.normal(-(sigma**2) / 2, sigma, n))).tolist()
    return samples


# --- Hypothesis properties -------------------------------------------------------------------


@fast
@given(baseline=samples, factor=st.floats(1.0, 10.0))
def test_uniformly_faster_run_never_regresses(baseline: list[float], factor: float) -> None:
    result = compare("decode_tok_s", baseline, [x * factor for x in baseline])
    assert result.outcome is not Outcome.REGRESSION
    assert result.ratio >= 1.0


@fast
@given(metric=metrics, baseline=noisy, current=noisy, factor=st.floats(0.85, 1.15))
def test_swapping_runs_swaps_regression_and_improvement(
    metric: str, baseline: list[float], current: list[float], factor: float
) -> None:
    current = [x * factor for x in current]
    forward, backward = compare(metric, baseline, current), compare(metric, current, baseline)
    assert backward.outcome is FLIPPED[forward.outcome]
    assert backward.p_value == forward.p_value


@fast
@given(metric=metrics, baseline=samples, current=samples, scale=st.floats(1e-3, 1e3))
def test_scale_invariance(metric: str, baseline: list[float], current: list[float], scale: float) -> None:
    plain = compare(metric, baseline, current)
    scaled = compare(metric, [x * scale for x in baseline], [x * scale for x in current])
    assert scaled.outcome is plain.outcome
    assert scaled.p_value == plain.p_value
    assert scaled.ratio == pytest.approx(plain.ratio, rel=1e-9)
    assert (scaled.ci_low, scaled.ci_high) == pytest.approx((plain.ci_low, plain.ci_high), rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(metric=metrics, seed=st.integers(0, 2**32 - 1), cv=st.sampled_from([0.002, 0.01]))
def test_same_distribution_with_small_noise_is_unchanged(metric: str, seed: int, cv: float) -> None:
    rng = np.random.default_rng(seed)
    result = compare(metric, lognormal(rng, cv), lognormal(rng, cv))
    assert result.outcome is Outcome.UNCHANGED, result.message()


# --- decisions -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_clear_drop_with_two_percent_noise_is_a_regression(seed: int) -> None:
    rng = np.random.default_rng(seed)
    result = compare("decode_tok_s", lognormal(rng, 0.02), lognormal(rng, 0.02, value=63.0))
    assert result.outcome is Outcome.REGRESSION
    assert result.message().startswith("decode_tok_s regressed:")
    assert result.ci_high < 1.0 and result.p_value < 0.01
    assert result.change == pytest.approx(-0.10, abs=0.03)


def test_lower_is_better_metrics_flip_the_sense() -> None:
    rng = np.random.default_rng(1)
    base, slower = lognormal(rng, 0.02, value=0.1), lognormal(rng, 0.02, value=0.11)
    assert compare("ttft_s", base, slower).outcome is Outcome.REGRESSION
    assert compare("ttft_s", base, slower).change < 0  # worse is negative whatever the direction
    assert compare("decode_tok_s", base, slower).outcome is Outcome.IMPROVEMENT
    assert compare("ttft_s", slower, base).outcome is Outcome.IMPROVEMENT
    custom = compare("queue_s", base, slower, direction=Direction.LOWER_IS_BETTER, threshold=0.05)
    assert custom.outcome is Outcome.REGRESSION


def test_threshold_is_exact_on_the_regression_side() -> None:
    base = [100.0 + i * 0.01 for i in range(12)]  # nearly constant, so the p-value is tiny
    just_over = compare("decode_tok_s", base, [x * 0.969 for x in base])
    just_under = compare("decode_tok_s", base, [x * 0.971 for x in base])
    assert just_over.outcome is Outcome.REGRESSION
    assert just_under.outcome is Outcome.UNCHANGED
    assert compare("ttft_s", base, [x * 1.051 for x in base]).outcome is Outcome.REGRESSION
    assert compare("ttft_s", base, [x * 1.049 for x in base]).outcome is Outcome.UNCHANGED


def test_large_but_noisy_change_is_not_significant() -> None:
    baseline = [50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
    result = compare("decode_tok_s", baseline, [x * 0.9 for x in baseline])  # 10% lower, heavily overlapping
    assert result.change == pytest.approx(-0.10)
    assert result.outcome is Outcome.UNCHANGED
    assert "not significant" in result.message()


def test_insufficient_samples_are_never_a_silent_pass() -> None:
    few = [70.0, 71.0, 69.0, 70.5]
    assert len(few) < MIN_SAMPLES
    for baseline, current in [(few, few * 3), (few * 3, few), ([], few * 3)]:
        result = compare("decode_tok_s", baseline, current)
        assert result.outcome is Outcome.INSUFFICIENT
        assert "not a pass" in result.message() and "decode_tok_s" in result.message()
    # An alpha the exact test cannot reach with these sizes is also insufficient.
    assert compare("decode_tok_s", few * 2, few * 2, alpha=1e-6).outcome is Outcome.INSUFFICIENT


# --- messages --------------------------------------------------------------------------------


def test_message_is_one_actionable_line() -> None:
    rng = np.random.default_rng(3)
    result = compare("decode_tok_s", lognormal(rng, 0.02), lognormal(rng, 0.02, value=64.3))
    text = result.message()
    assert "\n" not in text
    for part in (
        f"{result.baseline_median:.4g} tok/s",
        f"{result.current_median:.4g} tok/s",
        f"{result.ratio - 1:+.1%}",
        "threshold 3%",
        "p=",
        "CI of shift ratio",
        f"n={DEFAULT_SAMPLES}/{DEFAULT_SAMPLES}",
    ):
        assert part in text, (part, text)
    improved = compare("decode_tok_s", lognormal(rng, 0.02, value=64.3), lognormal(rng, 0.02))
    assert "--update-baselines" in improved.message() and "\n" not in improved.message()
    latency = compare("ttft_s", [0.1] * 6, [0.1] * 6).message()
    assert "100 ms -> 100 ms" in latency and "unchanged" in latency


# --- input validation ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.0, -1.0])
@pytest.mark.parametrize("side", ["baseline", "current"])
def test_bad_samples_raise_naming_the_metric(bad: float, side: str) -> None:
    good = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0]
    runs = {"baseline": good, "current": good, side: [*good, bad]}
    with pytest.raises(ValueError, match=rf"itl_s: {side}"):
        compare("itl_s", runs["baseline"], runs["current"])


@pytest.mark.parametrize(
    ("metric", "kwargs"),
    [
        ("e2e_s", {"threshold": -0.1}),
        ("e2e_s", {"threshold": math.inf}),
        ("decode_tok_s", {"threshold": 1.0}),  # a rate cannot lose all of itself
        ("e2e_s", {"alpha": 0.0}),
        ("e2e_s", {"alpha": 0.5}),
    ],
)
def test_bad_settings_raise_naming_the_metric(metric: str, kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=metric):
        compare(metric, [1.0] * 6, [1.0] * 6, threshold=kwargs.get("threshold"), alpha=kwargs.get("alpha"))


def test_a_latency_threshold_may_allow_more_than_double() -> None:
    # 2.0: three times the baseline is the floor; the mirrored rate threshold is 2/3.
    base = [1.0, 1.01, 0.99, 1.02, 0.98, 1.0]
    assert compare("e2e_s", base, [2.5 * x for x in base], threshold=2.0).outcome is MetricOutcome.UNCHANGED
    assert compare("e2e_s", base, [3.2 * x for x in base], threshold=2.0).outcome is MetricOutcome.REGRESSION
    slower = [x / 3.2 for x in base]
    assert compare("decode_tok_s", base, slower, threshold=2 / 3).outcome is MetricOutcome.REGRESSION


def test_unknown_metric_needs_a_direction_and_threshold() -> None:
    with pytest.raises(ValueError, match="mystery_s"):
        compare("mystery_s", [1.0] * 6, [1.0] * 6)
    with pytest.raises(ValueError, match="mystery_s"):
        compare("mystery_s", [1.0] * 6, [1.0] * 6, direction=Direction.LOWER_IS_BETTER)


def test_every_metric_has_a_usable_default_threshold() -> None:
    assert all(0 < m.default_threshold < 1 and m.unit for m in METRICS.values())


# --- the rank test itself ----------------------------------------------------------------------


def brute_force_p_values(baseline: list[float], current: list[float]) -> tuple[float, float]:
    pooled = np.array(baseline + current)
    ranks = np.array([(np.sum(pooled < v) + np.sum(pooled <= v) + 1) / 2 for v in pooled])
    observed = ranks[len(baseline) :].sum()
    sums = [ranks[list(c)].sum() for c in itertools.combinations(range(len(pooled)), len(current))]
    return float(np.mean([s <= observed for s in sums])), float(np.mean([s >= observed for s in sums]))


@settings(max_examples=40, deadline=None)
@given(
    baseline=st.lists(st.integers(1, 6), min_size=2, max_size=6),
    current=st.lists(st.integers(1, 6), min_size=2, max_size=6),
)
def test_exact_p_values_match_enumeration_with_ties(baseline: list[int], current: list[int]) -> None:
    expected = brute_force_p_values([float(x) for x in baseline], [float(x) for x in current])
    got = rank_sum_p_values(np.array(baseline, float), np.array(current, float))
    assert got == pytest.approx(expected, abs=1e-12)


def test_normal_approximation_beyond_the_exact_range() -> None:
    rng = np.random.default_rng(5)
    n = EXACT_MAX_N // 2 + 4
    base, cur = lognormal(rng, 0.02, n=n), lognormal(rng, 0.02, n=n, value=66.0)
    forward, backward = compare("decode_tok_s", base, cur), compare("decode_tok_s", cur, base)
    assert forward.outcome is Outcome.REGRESSION and backward.outcome is Outcome.IMPROVEMENT
    assert forward.p_value == backward.p_value
    # Just inside the exact range, the approximation agrees with the exact tail.
    x, y = np.log(lognormal(rng, 0.02, n=28)), np.log(lognormal(rng, 0.02, n=28, value=69.0))
    exact = rank_sum_p_values(x, y)
    approx = rank_sum_p_values(np.r_[x, x[:1]], y)  # one more sample crosses EXACT_MAX_N
    assert approx[0] == pytest.approx(exact[0], abs=0.05)


def test_one_stalled_sample_does_not_fake_a_regression() -> None:
    rng = np.random.default_rng(11)
    base, cur = lognormal(rng, 0.02), lognormal(rng, 0.02)
    cur[0] *= 0.7
    assert compare("decode_tok_s", base, cur).outcome is Outcome.UNCHANGED


EXTREME = st.lists(st.floats(min_value=5e-324, max_value=1.7976931348623157e308), min_size=5, max_size=14)


@given(metric=metrics, baseline=EXTREME, current=EXTREME)
def test_any_finite_positive_samples_give_a_finite_verdict_and_a_short_line(
    metric: str, baseline: list[float], current: list[float]
) -> None:
    """Extreme but finite samples (a subnormal against the largest float) neither overflow nor print
    inf, nan or a 300-digit number."""
    result = compare(metric, baseline, current)
    numbers = (result.baseline_median, result.current_median, result.ratio, result.change)
    assert all(math.isfinite(x) for x in numbers), result
    if result.outcome is not Outcome.INSUFFICIENT:
        assert math.isfinite(result.ci_low) and math.isfinite(result.ci_high) and result.ci_low <= result.ci_high
    line = result.message()
    assert "inf" not in line and "nan" not in line and len(line) < 400, line


def test_the_audits_extreme_pair_is_judged() -> None:
    assert compare("decode_tok_s", [1e-300] * 12, [1e308] * 12).outcome is Outcome.IMPROVEMENT
    worse = compare("decode_tok_s", [1e308] * 12, [1e-300] * 12)
    assert worse.outcome is Outcome.REGRESSION and "-100.0%" in worse.message()
