"""Throughput per round, the meter's per-round callback, and the options that drive sequential runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sglperf.baselines import regression, store
from sglperf.baselines.sequential import SequentialPlan
from sglperf.measure.meter import measure
from sglperf.measure.samples import Chunk, RequestSample, WorkloadResult, round_metric_values, round_stats
from sglperf.model.deployment import Workload
from sglperf.model.metrics import METRICS, Direction
from tests.test_meter import OUTPUT_LEN, Emulators, prompt_set, workload

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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    emus = Emulators(tmp_path_factory.mktemp("emulators"))
    try:
        yield emus.start()
    finally:
        emus.close()


def _run(url: str, concurrency: int, repeats: int, on_round: object = None) -> WorkloadResult:
    return measure(
        url,
        workload("native", repeats=repeats),
        prompt_set(4),
        concurrency=concurrency,
        chunk_timeout_s=10.0,
        on_round=on_round,  # type: ignore[arg-type]
    )


def test_meter_records_rounds_and_throughput_at_concurrency_above_one(server: str) -> None:
    result = _run(server, 4, 2)
    assert [r.round for r in result.rounds] == [0, 1] and all(r.requests == 4 for r in result.rounds)
    samples = regression.round_samples(result)
    assert len(samples["output_tok_s"]) == 2 and len(samples["request_s"]) == 2
    for tok, req in zip(samples["output_tok_s"], samples["request_s"], strict=True):
        assert tok == pytest.approx(req * OUTPUT_LEN)  # every request produces exactly output_len tokens
    # Four streams share a round: more than one stream's rate, less than four unhindered ones.
    per_stream = result.summary["decode_tok_s"].median
    assert per_stream < result.summary["output_tok_s"].median < 4 * per_stream
    single = regression.round_samples(_run(server, 1, 1))
    assert "output_tok_s" not in single and "request_s" not in single


def test_on_round_stops_the_loop_and_without_it_every_round_runs(server: str) -> None:
    seen: list[int] = []

    def stop_after_two(partial: WorkloadResult) -> bool:
        seen.append(len(partial.rounds))
        return len(partial.rounds) == 2

    stopped = _run(server, 2, 4, stop_after_two)
    assert seen == [1, 2] and len(stopped.rounds) == 2
    assert {s.repeat for s in stopped.samples} == {0, 1}
    assert stopped.server_accept_length is None or stopped.server_accept_length > 0
    assert len(_run(server, 2, 3).rounds) == 3


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
