"""Throughput per round and the meter's per-round callback, measuring the emulator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sglperf.baselines import regression
from sglperf.measure.meter import measure
from sglperf.measure.samples import WorkloadResult

from ..support.meter import OUTPUT_LEN, Emulators, prompt_set, workload


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
