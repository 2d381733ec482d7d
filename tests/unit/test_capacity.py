"""The capacity search's statistics and its workload: a sign test per rate, the highest rate that meets
with every rate below it, a fall only where the baseline met and now misses, and the TOML refused when
it cannot work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from sglperf.baselines.capacity import (
    ALPHA,
    Level,
    RateStep,
    compare,
    ladder,
    sign_test_p,
    stop_above,
)
from sglperf.model.workload import CAPACITY_MIN_ROUNDS, LoadPoint, Workload


def step(rate: float, met: int, n: int = 12, target: float = 0.9) -> RateStep:
    return RateStep(rate, (1.0,) * met + (0.5,) * (n - met), target)


def test_the_sign_test_is_the_binomial_tail() -> None:
    assert sign_test_p(12, 12) == pytest.approx(1 / 4096)
    assert sign_test_p(11, 12) == pytest.approx(13 / 4096)
    assert sign_test_p(10, 12) == pytest.approx(79 / 4096)
    assert sign_test_p(0, 12) == 1.0
    with pytest.raises(ValueError, match="successes <= n"):
        sign_test_p(13, 12)


def test_seven_rounds_is_the_fewest_that_can_decide_and_twelve_tolerate_one_dissent() -> None:
    assert sign_test_p(CAPACITY_MIN_ROUNDS, CAPACITY_MIN_ROUNDS) < ALPHA
    assert sign_test_p(CAPACITY_MIN_ROUNDS - 1, CAPACITY_MIN_ROUNDS - 1) > ALPHA
    assert [step(1, met).level for met in (12, 11, 10, 6, 2, 1, 0)] == [
        Level.MEETS,
        Level.MEETS,
        Level.UNCLEAR,
        Level.UNCLEAR,
        Level.UNCLEAR,
        Level.MISSES,
        Level.MISSES,
    ]


def test_a_round_exactly_at_the_target_meets_it() -> None:
    assert RateStep(1, (0.9,) * 8, 0.9).level is Level.MEETS


@given(shares=st.lists(st.floats(0, 1), min_size=1, max_size=30), target=st.floats(0.01, 1))
def test_a_level_depends_on_the_rounds_not_their_order_and_a_better_round_never_lowers_it(
    shares: list[float], target: float
) -> None:
    rank = {Level.MISSES: 0, Level.UNCLEAR: 1, Level.MEETS: 2}
    level = RateStep(1, tuple(shares), target).level
    assert RateStep(1, tuple(reversed(shares)), target).level is level
    better = RateStep(1, (*shares[1:], 1.0), target).level
    assert rank[better] >= rank[level]


def test_the_capacity_is_the_highest_rate_meeting_with_every_rate_below() -> None:
    assert ladder([step(2, 12), step(1, 12), step(4, 0)]).capacity == 2
    found = ladder([step(1, 12), step(2, 12), step(4, 0)])
    assert found.first_miss == 4 and found.describe() == "2 req/s (misses at 4 req/s)"
    assert ladder([step(1, 12), step(2, 6), step(4, 12)]).capacity == 1  # unclear at 2: no higher claim
    assert ladder([step(1, 0)]).describe() == "below 1 req/s (misses at 1 req/s)"
    assert ladder([step(1, 12), step(2, 12)]).describe() == "2 req/s (or more: the highest rate measured meets)"
    with pytest.raises(ValueError, match="each rate once"):
        ladder([step(1, 12), step(1, 11)])


def test_the_search_stops_at_the_lowest_rate_that_misses() -> None:
    assert stop_above([step(1, 12), step(2, 6)]) is None
    stop = stop_above([step(4, 0), step(2, 1), step(1, 12)])
    assert stop is not None and stop.rate == 2


def test_a_fall_needs_a_confident_meet_in_the_baseline_and_a_confident_miss_now() -> None:
    baseline = ladder([step(1, 12), step(2, 12), step(4, 1)])
    fell = compare(ladder([step(1, 12), step(2, 0)]), baseline)
    assert fell.fell
    assert fell.lines[0] == "capacity fell: capacity 1 req/s (misses at 2 req/s); baseline 2 req/s (misses at 4 req/s)"
    assert fell.lines[1].startswith("now 2 req/s: 0 of 12 rounds kept goodput >= 0.9 (misses, sign test p = ")
    noisy = compare(ladder([step(1, 12), step(2, 6)]), baseline)
    assert not noisy.fell and noisy.lines[1].startswith("unclear now where the baseline met: 2 req/s: 6 of 12")
    # Missing where the baseline missed too is no fall, nor is a rate the baseline never measured.
    assert not compare(ladder([step(1, 12), step(2, 12), step(4, 0)]), baseline).fell
    assert not compare(ladder([step(8, 0)]), baseline).fell


def _workload(**kw: Any) -> Workload:
    return Workload.model_validate({"id": "w", "prompts": Path("p.jsonl"), **kw})


def test_a_capacity_workload_has_a_rate_load_point_per_step_each_measured_as_a_plain_rate_workload() -> None:
    searched = _workload(capacity={"rates": [0.5, 1, 2]}, slo={"ttft_s": 2}, max_concurrency=8, requests=16)
    points = searched.load_points()
    assert points == [LoadPoint(8, 0.5), LoadPoint(8, 1.0), LoadPoint(8, 2.0)]
    assert [p.tag for p in points] == ["r0.5", "r1", "r2"]
    at_one = searched.at(points[1])
    assert at_one.rate == 1.0 and not at_one.sequential
    assert at_one.schedule() == "rate=1 poisson burstiness=1 seed=0 requests=16 cap=8"
    assert searched.capacity is not None and searched.capacity.goodput == 0.9


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"capacity": {"rates": [1, 2]}}, "capacity: a capacity search needs an slo"),
        ({"capacity": {"rates": [1, 2]}, "slo": {"e2e_s": 1}, "rate": 1}, "rate, capacity: a capacity search"),
        ({"capacity": {"rates": [1, 2]}, "slo": {"e2e_s": 1}, "repeats": 6}, "repeats: a capacity search needs"),
        ({"capacity": {"rates": [2, 1]}, "slo": {"e2e_s": 1}}, "capacity rates must rise"),
        ({"capacity": {"rates": [1]}, "slo": {"e2e_s": 1}}, "at least 2 items"),
        ({"capacity": {"rates": [1, 2]}, "slo": {"e2e_s": 1}, "concurrency": [2]}, "concurrency: a workload"),
        ({"capacity": {"rates": [1, 2], "goodput": 1.5}, "slo": {"e2e_s": 1}}, "less than or equal to 1"),
    ],
)
def test_a_capacity_search_that_cannot_work_is_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _workload(**fields)
