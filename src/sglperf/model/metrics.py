"""The metric table: every measured metric's name, unit, direction and default regression floor.

The meter, the statistics, the regression check, the report and the plots all read this table, so
a metric is added (or its unit corrected) in one place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class Direction(str, Enum):
    HIGHER_IS_BETTER = "higher"
    LOWER_IS_BETTER = "lower"

    @property
    def threshold_limit(self) -> float:
        """Thresholds must stay below this: a rate can lose less than all of itself (0.5: half as
        fast), a latency may grow without bound (2.0: three times the baseline)."""
        return 1.0 if self is Direction.HIGHER_IS_BETTER else float("inf")


class MetricOutcome(str, Enum):
    """One metric's verdict against its baseline."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    INSUFFICIENT = "insufficient"  # too few samples to judge; never counts as a pass

    @property
    def fails(self) -> bool:
        return self in (MetricOutcome.REGRESSION, MetricOutcome.INSUFFICIENT)


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    direction: Direction
    # Relative floor: the smallest change worth failing a release for, given the metric's run-to-run
    # noise (`sglperf.baselines.stats` explains the numbers).
    default_threshold: float
    label: str  # column heading in tables
    # Per round (one value per round over all its requests) rather than a mean over per-request values.
    per_round: bool = False
    # A metric that is part of another takes that one's floor where a deployment sets it and not this one's.
    floor_from: str | None = None


# Named here because the capacity search reads the share by name (`sglperf.session.capacity_search`).
GOODPUT_SHARE = "goodput_share"
GOODPUT_REQ_S = "goodput_req_s"
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        # Steady-state decode is the quietest timing (~1-2% CV).
        Metric("decode_tok_s", "tok/s", Direction.HIGHER_IS_BETTER, 0.03, "decode tok/s"),
        # Prefill plus scheduling and queueing jitter.
        Metric("ttft_s", "s", Direction.LOWER_IS_BETTER, 0.05, "TTFT s"),
        # Per-token gap, same kernels as decode throughput.
        Metric("itl_s", "s", Direction.LOWER_IS_BETTER, 0.03, "ITL s"),
        # Sums TTFT jitter with decode.
        Metric("e2e_s", "s", Direction.LOWER_IS_BETTER, 0.05, "E2E s"),
        # A mean over thousands of draft steps: low noise, sensitive to model changes.
        Metric("accept_length", "tok/step", Direction.HIGHER_IS_BETTER, 0.03, "accept"),
        # Speculative decoding only: the target's verify steps per second over the decode window, the
        # kernels' half of decode tok/s (= verify steps/s x tokens per step); same noise as decode.
        Metric(
            "verify_steps_s", "step/s", Direction.HIGHER_IS_BETTER, 0.03, "verify steps/s", floor_from="decode_tok_s"
        ),
        # Concurrency > 1 only: a round's completion tokens (requests) over its wall time, first send
        # to last token. The wall time is the batch's end-to-end latency (prefill of every request,
        # the decode loop, the tail of the last stream), so it gets E2E's floor. req/s is tok/s over
        # output_len (every request must produce exactly output_len tokens): the same verdict.
        Metric("output_tok_s", "tok/s", Direction.HIGHER_IS_BETTER, 0.05, "output tok/s", per_round=True),
        Metric("request_s", "req/s", Direction.HIGHER_IS_BETTER, 0.05, "req/s", per_round=True),
        # Under load (concurrency > 1 or a rate) only: tails per round, where queueing shows before any
        # median moves. Floors from bench/tail_verdicts.py (real emulator rounds at a rate, two sessions,
        # false alarms <= 1% each): TTFT tails varied 1-2% per round there, but the emulator's prefill has
        # no noise of its own, so 10-15% until GPU rounds say otherwise. Under MTP the ITL p90 sits on the
        # edge of the cluster of tokens from steps that accepted no draft and jumps with each round's
        # rejections (7% CV): 15%. The p99 is quieter (5%): 10%.
        Metric("ttft_p90_s", "s", Direction.LOWER_IS_BETTER, 0.10, "TTFT p90 s", per_round=True),
        Metric("ttft_p99_s", "s", Direction.LOWER_IS_BETTER, 0.15, "TTFT p99 s", per_round=True),
        Metric("itl_p90_s", "s", Direction.LOWER_IS_BETTER, 0.15, "ITL p90 s", per_round=True),
        Metric("itl_p99_s", "s", Direction.LOWER_IS_BETTER, 0.10, "ITL p99 s", per_round=True),
        # With a workload slo, at any load: the share of a round's requests that met every target, and
        # those requests per second of the round's wall time. 5% fails the share on one request in 16
        # (the point); req/s adds the round's wall time to that and needs 7.5% (bench/tail_verdicts.py).
        Metric(GOODPUT_SHARE, "share", Direction.HIGHER_IS_BETTER, 0.05, "goodput share", per_round=True),
        Metric(GOODPUT_REQ_S, "req/s", Direction.HIGHER_IS_BETTER, 0.075, "goodput req/s", per_round=True),
    )
}
METRIC_NAMES = tuple(METRICS)


def with_inherited_floors(thresholds: dict[str, float]) -> dict[str, float]:
    """``thresholds`` plus, for each metric not in it whose ``floor_from`` is, that metric's floor."""
    inherited = {
        m.name: thresholds[m.floor_from]
        for m in METRICS.values()
        if m.floor_from in thresholds and m.name not in thresholds
    }
    return {**thresholds, **inherited}


def unit_of(metric: str) -> str:
    known = METRICS.get(metric)
    return known.unit if known else ""


def format_ratio_change(ratio: float) -> str:
    """The change of a value as a signed percentage of it (a latency that rose 15.2% is "+15.2%");
    beyond a hundredfold a factor, which stays short for any finite ratio."""
    return f"{ratio - 1.0:+.1%}" if ratio < 100 else f"x{ratio:.3g}"


def format_level(level: float) -> str:
    """A confidence level with the fewest decimals that do not round it up to 100%: "98%", "99.5%",
    "99.98%" (a sequential plan's small alpha)."""
    percent = level * 100
    for digits in range(5):
        shown = f"{percent:.{digits}f}"
        if float(shown) < 100:
            return f"{shown}%"
    return f"{percent:.6g}%"


def describe_change(metric: str, before: float, after: float) -> str:
    """How a value moved, in the one convention every report uses: the change of the value itself,
    then whether that is better or worse for this metric ("+15.2% (worse)" for a latency)."""
    if before == 0 or not math.isfinite(before) or not math.isfinite(after):
        return "n/a"
    ratio = after / before
    if ratio == 1.0 or metric not in METRICS:
        return format_ratio_change(ratio)
    better = (ratio > 1.0) == (METRICS[metric].direction is Direction.HIGHER_IS_BETTER)
    return f"{format_ratio_change(ratio)} ({'better' if better else 'worse'})"
