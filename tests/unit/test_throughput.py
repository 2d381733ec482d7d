"""Throughput per round, and the options that drive sequential runs (measured on the emulator, with the
meter's per-round callback: tests/integration/test_throughput_emulator.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglperf.baselines import regression, store
from sglperf.baselines.sequential import SequentialPlan
from sglperf.measure.samples import Chunk, RequestSample, round_metric_values, round_stats
from sglperf.model.metrics import METRICS, Direction
from sglperf.model.workload import Workload

pytestmark = pytest.mark.selftest


def _sample(tokens: int, last: float) -> RequestSample:
    chunks = (Chunk(0.1, 1), Chunk(last, tokens - 1))
    return RequestSample("p", 0, 0.1, None, None, last + 0.01, tokens, chunks, None, None, None)


def test_round_throughput_is_tokens_over_first_send_to_last_chunk() -> None:
    stats = round_stats(0, [10.0, 10.5], [_sample(100, 2.0), _sample(100, 1.0)])
    assert stats.wall_s == pytest.approx(2.0) and stats.completion_tokens == 200 and stats.requests == 2
    assert round_metric_values([stats], 2, "output_tok_s") == pytest.approx((100.0,))
    assert round_metric_values([stats], 2, "request_s") == pytest.approx((1.0,))
    assert round_metric_values([stats], 1, "output_tok_s") == ()  # concurrency 1: absent, by decision
    with pytest.raises(KeyError):
        round_metric_values([stats], 2, "decode_tok_s")


def test_throughput_metrics_are_in_the_table() -> None:
    for name, unit in (("output_tok_s", "tok/s"), ("request_s", "req/s")):
        assert METRICS[name].unit == unit and METRICS[name].direction is Direction.HIGHER_IS_BETTER
        assert METRICS[name].per_round and 0 < METRICS[name].default_threshold < 0.1


def test_old_baselines_without_throughput_still_compare() -> None:
    old = store.make_entry("w", 8, "d", 256, {"decode_tok_s": [100.0 + i / 10 for i in range(12)]})
    current = {"decode_tok_s": [100.0 + i / 10 for i in range(12)], "output_tok_s": [700.0] * 12}
    comparisons = regression.compare_entry(old, current, {})
    assert [c.metric for c in comparisons] == ["decode_tok_s"]
    plan = SequentialPlan()
    judged = regression.compare_entry(old, {"decode_tok_s": current["decode_tok_s"][:3]}, {}, plan=plan)
    assert judged[0].n_current == 3 and judged[0].alpha == plan.nominal_alpha(12)


def _workload(**kw: object) -> Workload:
    return Workload(**{"id": "w", "prompts": Path("p.jsonl"), **kw})  # type: ignore[arg-type]


def test_sequential_options_are_validated() -> None:
    assert _workload().sequential and _workload().min_repeats == 3
    assert _workload(repeats=2, sequential=False).repeats == 2  # a fixed run may be shorter than min_repeats
    with pytest.raises(ValueError, match="min_repeats: 5 exceeds repeats 4"):
        _workload(repeats=4, min_repeats=5)
    with pytest.raises(ValueError, match="min_repeats"):
        _workload(min_repeats=1)
    with pytest.raises(ValueError, match="sequential"):
        _workload(sequential="yes")
    with pytest.raises(ValueError, match="threshold for output_tok_s must be a fraction between 0 and 1"):
        _workload(thresholds={"output_tok_s": 2.0})
    # A latency may be allowed to grow past double (a noisy shared CPU box): 2.0 is three times.
    assert _workload(thresholds={"itl_s": 2.0}).thresholds == {"itl_s": 2.0}
    with pytest.raises(ValueError, match=r"threshold for itl_s must be above 0, e.g. 0.03 \(\+3%\) or 2.0"):
        _workload(thresholds={"itl_s": 0.0})
