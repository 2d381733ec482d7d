"""What a round under load yields beside its means: TTFT and ITL tails, goodput against a workload's
slo, and how late an open-loop round sent; and the open-loop fields of a workload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sglperf.baselines import regression, store
from sglperf.measure.samples import (
    TAIL_METRICS,
    Chunk,
    RequestSample,
    WorkloadResult,
    round_metric_values,
    round_stats,
    token_gaps,
)
from sglperf.model.metrics import METRICS, Direction
from sglperf.model.workload import LoadPoint, Slo, Workload

from ..support.baselines import provenance


def _sample(ttft: float, gaps: list[float], *, repeat: int = 0, lag: float | None = None) -> RequestSample:
    """A request whose first chunk comes at ``ttft`` and each later one-token chunk ``gaps`` apart."""
    times = [ttft]
    for gap in gaps:
        times.append(times[-1] + gap)
    chunks = tuple(Chunk(t, 1) for t in times)
    itl = (times[-1] - times[0]) / len(gaps) if gaps else None
    return RequestSample(
        "p", repeat, ttft, 1 / itl if itl else None, itl, times[-1], len(times), chunks, None, None, None,
        send_lag_s=lag,
    )  # fmt: skip


def test_token_gaps_are_per_token_after_the_first_chunk() -> None:
    sample = _sample(0.5, [0.1, 0.3])
    doubled = RequestSample(
        "p", 0, 0.5, None, None, 0.9, 3, (Chunk(0.5, 1), Chunk(0.9, 2)), None, None, None
    )  # fmt: skip
    assert token_gaps([sample]) == pytest.approx([0.1, 0.3])
    assert token_gaps([doubled]) == pytest.approx([0.2, 0.2])  # a two-token chunk: its wait shared by both
    one_read = RequestSample(
        "p", 0, 0.5, None, None, 0.9, 3, (Chunk(0.5, 1), Chunk(0.9, 1), Chunk(0.9, 1)), None, None, None
    )  # fmt: skip
    assert token_gaps([one_read]) == pytest.approx([0.2, 0.2])  # two chunks in one read: one wait, not a 0


def test_tails_are_percentiles_of_the_rounds_requests_and_gaps() -> None:
    samples = [_sample(0.1 * (i + 1), [0.01] * 9 + [0.01 * (i + 1)]) for i in range(10)]
    stats = round_stats(0, [0.0] * 10, samples)
    assert stats.tails is not None
    assert stats.tails["ttft_p90_s"] == pytest.approx(0.91) and stats.tails["ttft_p99_s"] == pytest.approx(0.991)
    assert stats.tails["itl_p99_s"] > stats.tails["itl_p90_s"] >= 0.01
    assert round_metric_values([stats], 8, "ttft_p99_s") == pytest.approx((0.991,))
    assert round_metric_values([stats], 1, "ttft_p99_s") == ()  # closed loop at concurrency 1: no load
    assert round_metric_values([stats], 1, "ttft_p99_s", open_loop=True) == pytest.approx((0.991,))


def test_goodput_counts_requests_meeting_every_target_and_a_round_meeting_none_counts_half() -> None:
    samples = [_sample(0.2, [0.05] * 4), _sample(0.2, [0.5] * 4), _sample(3.0, [0.05] * 4), _sample(0.1, [])]
    slo = Slo(ttft_s=1.0, itl_s=0.1)
    stats = round_stats(0, [0.0] * 4, samples, slo=slo)
    # The one-chunk answer has no ITL: it missed that target.
    assert stats.slo_met == 1
    assert round_metric_values([stats], 1, "goodput_share") == pytest.approx((0.25,))
    assert round_metric_values([stats], 1, "goodput_req_s") == pytest.approx((1 / stats.wall_s,))
    none_met = round_stats(0, [0.0] * 4, samples, slo=Slo(ttft_s=0.01))
    assert round_metric_values([none_met], 1, "goodput_share") == pytest.approx((0.5 / 4,))
    assert round_metric_values([round_stats(0, [0.0] * 4, samples)], 4, "goodput_share") == ()  # no slo


def test_send_lag_of_an_open_loop_round() -> None:
    samples = [_sample(0.1, [0.01], lag=0.001 * i) for i in range(11)]
    stats = round_stats(0, [0.0] * 11, samples)
    assert stats.send_lag_p90_s == pytest.approx(0.009) and stats.send_lag_max_s == pytest.approx(0.010)
    assert round_stats(0, [0.0], [_sample(0.1, [0.01])]).send_lag_p90_s is None  # closed loop: none


def test_the_new_metrics_are_in_the_table_with_their_direction() -> None:
    for name, _, _ in TAIL_METRICS:
        assert METRICS[name].direction is Direction.LOWER_IS_BETTER and METRICS[name].per_round
    for name in ("goodput_share", "goodput_req_s"):
        assert METRICS[name].direction is Direction.HIGHER_IS_BETTER and METRICS[name].per_round
    assert METRICS["ttft_p99_s"].default_threshold > METRICS["ttft_p90_s"].default_threshold


def _workload(**kw: Any) -> Workload:
    return Workload.model_validate({"id": "w", "prompts": Path("p.jsonl"), **kw})


def test_a_rate_workload_has_one_load_point_and_a_schedule_that_names_every_send_setting() -> None:
    closed = _workload(concurrency=[1, 8])
    assert closed.load_points() == [LoadPoint(1), LoadPoint(8)] and closed.schedule() == ""
    opened = _workload(rate=2.5, burstiness=0.5, requests=40, max_concurrency=16)
    assert opened.load_points() == [LoadPoint(16, 2.5)]
    assert [p.tag for p in opened.load_points()] == ["r2.5"]
    assert opened.schedule() == "rate=2.5 poisson burstiness=0.5 seed=0 requests=40 cap=16"
    assert _workload(rate=1, arrival="constant").schedule() == "rate=1 constant seed=0 requests=prompts cap=none"
    assert LoadPoint(16, 2.5).describe() == "2.5 req/s, at most 16 in flight"
    timed = _workload(rate=4, arrival="constant", duration_s=2.5).schedule()
    assert timed == "rate=4 constant seed=0 duration=2.5s cap=none"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rate": 2, "concurrency": [4]}, "concurrency: a workload with a rate sends on its schedule"),
        ({"burstiness": 0.5}, "burstiness: only for a workload with a rate"),
        ({"rate": 2, "slo": {}}, "an slo needs at least one of ttft_s, itl_s, e2e_s"),
        ({"rate": 0}, "greater than 0"),
        ({"duration_s": 5}, "duration_s: only for a workload with a rate"),
        ({"rate": 2, "requests": 8, "duration_s": 5}, "bounded by a number of requests or by a duration, not both"),
    ],
)
def test_open_loop_fields_out_of_place_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _workload(**fields)


def _result(rate: float | None, rounds: int) -> WorkloadResult:
    stats = [
        round_stats(r, [0.0] * 10, [_sample(0.1 + 0.01 * i, [0.02] * 5, repeat=r) for i in range(10)], slo=Slo(e2e_s=9))
        for r in range(rounds)
    ]
    samples = tuple(s for r in range(rounds) for s in [_sample(0.1, [0.02] * 5, repeat=r)])
    return WorkloadResult(
        "u", "w", "native", 10, 6, "s", "d", samples, {}, None, None, None, 1.0, tuple(stats), rate=rate
    )


def test_an_open_loop_entry_is_keyed_by_its_rate_and_compares_only_with_the_same_schedule(tmp_path: Path) -> None:
    opened = _workload(rate=2.0, max_concurrency=10)
    samples = regression.round_samples(_result(2.0, 3))
    assert {"ttft_p99_s", "itl_p90_s", "goodput_share", "output_tok_s"} <= samples.keys()
    entry = store.make_entry("w", 10, "d", 6, samples, rate=2.0, schedule=opened.schedule())
    assert entry.key == "w@r2"
    path = tmp_path / "b.json"
    store.record(path, "qwen36", "mtp1", provenance(), entry)
    same = regression.look_up(path, provenance(), entry.key, "record it", opened.schedule())
    assert same.entry == entry
    other = _workload(rate=2.0, max_concurrency=10, seed=1).schedule()
    moved = regression.look_up(path, provenance(), entry.key, "record it", other)
    assert moved.entry is None and "w@r2 was sent as [rate=2 poisson burstiness=1 seed=0" in moved.problem
    assert "this run as [rate=2 poisson burstiness=1 seed=1" in moved.problem
