"""Paired ABBA comparisons: the log ratios, the exact signed-rank test, the verdicts and their invariants."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglperf.baselines.paired import (
    EXACT_MAX_PAIRS,
    PairedComparison,
    _ci_rank,
    _normal_p_values,
    _sign_pattern_tails,
    _signed_rank_p_values,
    abba_log_ratios,
    compare_paired,
)
from sglperf.baselines.stats import _doubled_midranks
from sglperf.model.metrics import METRICS
from sglperf.model.variant_effect import EffectVerdict

pytestmark = pytest.mark.selftest

MIRRORED = {
    EffectVerdict.BETTER: EffectVerdict.WORSE,
    EffectVerdict.WORSE: EffectVerdict.BETTER,
    EffectVerdict.NO_EFFECT: EffectVerdict.NO_EFFECT,
    EffectVerdict.UNDECIDED: EffectVerdict.UNDECIDED,
    EffectVerdict.NOT_JUDGED: EffectVerdict.NOT_JUDGED,
}

fast = settings(max_examples=60, deadline=None)
metrics = st.sampled_from(sorted(METRICS))
# Four sessions of equal length, values within +-10% on a 0.001 grid: ties and exact zeros do happen.
quads = st.integers(1, 14).flatmap(
    lambda n: st.lists(
        st.lists(st.integers(900, 1100), min_size=n, max_size=n).map(lambda xs: [x / 1000 for x in xs]),
        min_size=4,
        max_size=4,
    )
)
# Paired log ratios, on a grid so that ties and zeros occur, between about -15% and +15%.
log_ratio_lists = st.lists(st.integers(-150, 150).map(lambda k: k / 1000), min_size=0, max_size=24)


def brute_force_p_values(d: list[float]) -> tuple[float, float]:
    """Every sign pattern counted one by one: the definition the dynamic program must agree with."""
    nonzero = np.array([x for x in d if x != 0.0])
    scores = _doubled_midranks(np.abs(nonzero)).tolist()
    observed = sum(s for s, x in zip(scores, nonzero) if x > 0)
    sums = [sum(s for s, keep in zip(scores, signs) if keep) for signs in itertools.product((0, 1), repeat=len(scores))]
    return sum(t <= observed for t in sums) / len(sums), sum(t >= observed for t in sums) / len(sums)


def lognormal(rng: np.random.Generator, cv: float, n: int, value: float = 70.0) -> list[float]:
    sigma = math.sqrt(math.log1p(cv**2))
    samples: list[float] = (value * np.exp(rng.normal(-(sigma**2) / 2, sigma, n))).tolist()
    return samples


def abba(rng: np.random.Generator, factor: float, cv: float = 0.02, rounds: int = 12, blocks: int = 1) -> list[float]:
    reference = [lognormal(rng, cv, rounds) for _ in range(2 * blocks)]
    variant = [[v * factor for v in lognormal(rng, cv, rounds)] for _ in range(2 * blocks)]
    return abba_log_ratios(reference, variant)


# --- Exact p-values ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d", "p_lower", "p_higher"),
    [
        ([0.01, 0.02, 0.03], 1.0, 1 / 8),  # all 8 sign patterns; only "all positive" reaches 6
        ([-0.01, -0.02, -0.03], 1 / 8, 1.0),
        ([0.01, -0.02, 0.03], 6 / 8, 3 / 8),  # T+ = 1 + 3; sums 0,1,2,3,3,4,5,6
        ([0.01, -0.01, 0.02], 7 / 8, 3 / 8),  # midranks 1.5,1.5,3; T+ = 4.5; sums 0,1.5,1.5,3,3,4.5,4.5,6
        ([0.0, 0.01, 0.02, 0.03], 1.0, 1 / 8),  # the zero is dropped: three signed pairs
        ([0.0, 0.0], 1.0, 1.0),  # no pair has a sign
    ],
)
def test_hand_counted_p_values(d: list[float], p_lower: float, p_higher: float) -> None:
    c = compare_paired("decode_tok_s", d, 0.03)
    assert (c.p_lower, c.p_higher) == (p_lower, p_higher)
    assert c.n_pairs == len(d)


@settings(max_examples=40, deadline=None)
@given(d=st.lists(st.integers(-20, 20).map(lambda k: k / 100), min_size=0, max_size=10))
def test_p_values_count_every_sign_pattern(d: list[float]) -> None:
    assert _signed_rank_p_values(np.array(d, dtype=float)) == pytest.approx(brute_force_p_values(d), abs=1e-15)


def test_p_values_match_scipy_exact() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 8, 12, 20, 30):
        for _ in range(5):
            d = rng.normal(0.005, 0.02, n)  # continuous: no ties, no zeros, as scipy's exact method needs
            p_lower, p_higher = _signed_rank_p_values(d)
            assert p_lower == pytest.approx(stats.wilcoxon(d, alternative="less", method="exact").pvalue, rel=1e-12)
            assert p_higher == pytest.approx(stats.wilcoxon(d, alternative="greater", method="exact").pvalue, rel=1e-12)


def test_normal_approximation_takes_over_close_to_the_exact_values() -> None:
    rng = np.random.default_rng(3)
    d = np.round(rng.normal(0.004, 0.02, EXACT_MAX_PAIRS), 3)  # ties included
    d = d[d != 0]
    scores = _doubled_midranks(np.abs(d))
    exact = _signed_rank_p_values(d)
    approx = _normal_p_values(scores, int(scores[d > 0].sum()))
    assert approx == pytest.approx(exact, abs=2e-3)
    many = _signed_rank_p_values(np.round(rng.normal(0.0, 0.02, 200), 3))
    assert 0.0 < many[0] < 1.0 and 0.0 < many[1] < 1.0


def test_critical_ranks_are_the_tables() -> None:
    # One-sided 1% critical values of the signed-rank statistic (T <= k - 1 rejects).
    assert [_ci_rank(n, 0.01) for n in (7, 8, 10, 12, 15, 20)] == [1, 2, 6, 10, 20, 44]
    assert _ci_rank(12, 0.05) == 18
    # Past the exact range the normal approximation's rank is within a rank or two of the count's.
    n = EXACT_MAX_PAIRS + 1
    at_most, _ = _sign_pattern_tails(tuple(range(1, n + 1)))
    counted = int(np.flatnonzero(at_most / 2.0**n <= 0.01)[-1]) + 1
    assert abs(_ci_rank(n, 0.01) - counted) <= 2


# --- Hypothesis properties -------------------------------------------------------------------


@fast
@given(metric=metrics, d=log_ratio_lists, floor=st.sampled_from([0.0, 0.03, 0.05, 0.1]))
def test_swapping_the_variants_mirrors_everything(metric: str, d: list[float], floor: float) -> None:
    c = compare_paired(metric, d, floor)
    s = compare_paired(metric, [-x for x in d], floor)
    assert s.verdict is MIRRORED[c.verdict]
    assert (s.p_lower, s.p_higher) == (c.p_higher, c.p_lower)
    if d:
        # Exact in log space; the ratios are exp of mirrored logs, reciprocal up to rounding.
        assert math.log(s.ratio) == pytest.approx(-math.log(c.ratio), abs=1e-15)
        assert s.ratio == pytest.approx(1 / c.ratio, rel=1e-14)
        assert s.ci_low == pytest.approx(1 / c.ci_high, rel=1e-14)
        assert s.ci_high == pytest.approx(1 / c.ci_low, rel=1e-14)


@fast
@given(sessions=quads)
def test_swapping_sessions_negates_log_ratios_exactly(sessions: list[list[float]]) -> None:
    a1, b1, b2, a2 = sessions
    forward = abba_log_ratios([a1, a2], [b1, b2])
    assert abba_log_ratios([b1, b2], [a1, a2]) == [-x for x in forward]


@fast
@given(sessions=quads, power=st.integers(-40, 40), factor=st.floats(1e-3, 1e3))
def test_scaling_every_value_changes_nothing(sessions: list[list[float]], power: int, factor: float) -> None:
    a1, b1, b2, a2 = sessions
    d = abba_log_ratios([a1, a2], [b1, b2])

    def scaled(c: float) -> list[float]:
        return abba_log_ratios([[v * c for v in a1], [v * c for v in a2]], [[v * c for v in b1], [v * c for v in b2]])

    # A power of two scales exactly, and the quotients stay bitwise the same: so does everything downstream.
    assert scaled(2.0**power) == d
    assert compare_paired("decode_tok_s", scaled(2.0**power), 0.03) == compare_paired("decode_tok_s", d, 0.03)
    # Any other factor rounds each scaled value once.
    assert scaled(factor) == pytest.approx(d, abs=1e-12)


@fast
@given(
    true_ratio=st.floats(0.5, 2.0),
    k=st.floats(-0.2, 0.2),
    session_length=st.integers(1, 20),
    gap=st.floats(0.0, 5.0),
    blocks=st.integers(1, 3),
)
def test_exponential_drift_cancels(true_ratio: float, k: float, session_length: int, gap: float, blocks: int) -> None:
    spacing = session_length + gap  # sessions equally spaced: each starts `spacing` after the last
    reference: list[list[float]] = []
    variant: list[list[float]] = []
    order = "ABBA" * blocks
    for s, side in enumerate(order):
        value = 50.0 * (true_ratio if side == "B" else 1.0)
        rounds = [value * math.exp(k * (s * spacing + j)) for j in range(session_length)]
        (variant if side == "B" else reference).append(rounds)
    d = abba_log_ratios(reference, variant)
    assert len(d) == blocks * session_length
    assert d == pytest.approx([math.log(true_ratio)] * len(d), abs=1e-9)


@fast
@given(d=st.lists(st.floats(-0.2, 0.2), min_size=7, max_size=20, unique=True))
def test_interval_and_test_agree_without_ties(d: list[float]) -> None:
    values = np.array(d)
    if np.any(values == 0) or len(set(np.abs(values).tolist())) < len(d):
        return  # ties and zeros: the interval and the test may differ at the edge
    c = compare_paired("decode_tok_s", d, 0.03)
    assert c.verdict is not EffectVerdict.NOT_JUDGED
    walsh = [0.5 * (a + b) for a, b in itertools.combinations_with_replacement(d, 2)]
    if min(abs(w) for w in walsh) < 1e-12:
        return  # a Walsh average at 0 sits on the interval's edge
    assert (math.log(c.ci_low) > 0) == (c.p_higher < c.alpha)
    assert (math.log(c.ci_high) < 0) == (c.p_lower < c.alpha)
    assert c.ci_low <= c.ratio <= c.ci_high


# --- Verdicts ----------------------------------------------------------------------------------


def test_planted_ten_percent_drop_is_worse() -> None:
    rng = np.random.default_rng(11)
    c = compare_paired("decode_tok_s", abba(rng, 0.90), 0.03)
    assert c.n_pairs == 12
    assert c.verdict is EffectVerdict.WORSE
    assert c.ratio == pytest.approx(0.90, abs=0.02)
    assert c.ci_low < 0.90 < c.ci_high or c.ci_high < 0.97
    assert c.p_lower < 0.01 < c.p_higher


def test_a_a_is_no_effect() -> None:
    rng = np.random.default_rng(12)
    c = compare_paired("decode_tok_s", abba(rng, 1.0), 0.05)
    assert c.verdict is EffectVerdict.NO_EFFECT
    assert 0.95 < c.ci_low <= c.ratio <= c.ci_high < 1 / 0.95


def test_lower_latency_is_better() -> None:
    rng = np.random.default_rng(13)
    c = compare_paired("ttft_s", abba(rng, 0.85), 0.05)
    assert c.verdict is EffectVerdict.BETTER
    assert c.p_lower < c.alpha


def test_a_move_inside_the_floor_is_not_a_move() -> None:
    d = [0.01 + 0.0001 * i for i in range(12)]  # 1% higher, every pair the same way: p = 2**-12
    c = compare_paired("decode_tok_s", d, 0.03)
    assert c.p_higher == 2.0**-12
    assert c.verdict is EffectVerdict.NO_EFFECT


def test_wide_interval_is_undecided() -> None:
    d = [(-1) ** i * 0.01 * (i + 1) for i in range(12)]
    assert compare_paired("decode_tok_s", d, 0.03).verdict is EffectVerdict.UNDECIDED


@pytest.mark.parametrize(
    ("n", "alpha", "judged"), [(6, 0.01, False), (7, 0.01, True), (4, 0.05, False), (5, 0.05, True)]
)
def test_too_few_pairs_are_not_judged(n: int, alpha: float, judged: bool) -> None:
    d = [-0.10 - 0.01 * i for i in range(n)]  # a clear 10% drop: only the count can stop the verdict
    c = compare_paired("decode_tok_s", d, 0.03, alpha=alpha)
    assert (c.verdict is EffectVerdict.WORSE) == judged
    assert (c.verdict is EffectVerdict.NOT_JUDGED) == (not judged)
    if not judged:
        assert math.log(c.ci_low) == pytest.approx(min(d)) and math.log(c.ci_high) == pytest.approx(max(d))


def test_no_pairs() -> None:
    c = compare_paired("decode_tok_s", [], 0.03)
    assert c.verdict is EffectVerdict.NOT_JUDGED
    assert c.n_pairs == 0 and math.isnan(c.ratio) and math.isnan(c.ci_low)
    assert abba_log_ratios([], []) == []


def test_level_and_fields() -> None:
    c = compare_paired("decode_tok_s", [0.0] * 12, 0.03, alpha=0.05)
    assert isinstance(c, PairedComparison)
    assert c.level == pytest.approx(0.9)
    assert (c.ratio, c.ci_low, c.ci_high) == (1.0, 1.0, 1.0)
    assert c.verdict is EffectVerdict.NO_EFFECT  # identical rounds: nothing moved, bounded at 0


def test_quads_use_their_shortest_session() -> None:
    d = abba_log_ratios([[1.0, 1.0, 1.0], [1.0, 1.0], [2.0], [2.0]], [[2.0, 2.0], [2.0, 2.0, 2.0], [4.0], [2.0]])
    assert d == pytest.approx([math.log(2)] * 2 + [0.5 * math.log(2)])


def test_extreme_values_stay_finite() -> None:
    d = abba_log_ratios([[1e-300], [1e-300]], [[1e300], [1e300]])
    assert d == pytest.approx([math.log(1e300) - math.log(1e-300)])


# --- Errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "variant", "match"),
    [
        ([[1.0]], [[1.0]], "reference has 1 sessions"),
        ([[1.0], [1.0]], [[1.0], [1.0], [1.0], [1.0]], "same count"),
        ([[1.0], [0.0]], [[1.0], [1.0]], "reference session 1: .*finite and positive"),
        ([[1.0], [1.0]], [[math.nan], [1.0]], "variant session 0: .*finite and positive"),
        ([[1.0], [1.0]], [[-2.0], [1.0]], "variant session 0"),
        ([[1.0], [1.0]], [[math.inf], [1.0]], "variant"),
        ([[1.0], [1.0]], [["fast"], [1.0]], "variant session 0: values are not numbers"),
    ],
)
def test_bad_sessions_raise(reference: list[list[float]], variant: list[list[float]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        abba_log_ratios(reference, variant)


@pytest.mark.parametrize(
    ("metric", "d", "floor", "alpha", "match"),
    [
        ("nonsense", [0.0], 0.03, 0.01, "unknown metric"),
        ("decode_tok_s", [0.0], 1.0, 0.01, "threshold"),
        ("decode_tok_s", [0.0], -0.1, 0.01, "threshold"),
        ("decode_tok_s", [0.0], 0.03, 0.5, "alpha"),
        ("decode_tok_s", [0.0, math.inf], 0.03, 0.01, "finite"),
        ("decode_tok_s", [[0.0]], 0.03, 0.01, "flat"),
    ],
)
def test_bad_comparisons_raise(metric: str, d: list[float], floor: float, alpha: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compare_paired(metric, d, floor, alpha)
