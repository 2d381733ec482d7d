"""Runs of qwen36/mtp1 on a 2xA6000 runner as the history store keeps them: one measurement of
decode tok/s (regressed or not) and one intent verdict each."""

from __future__ import annotations

from sglperf.history.records import RunIdentity, StoredRun
from sglperf.model.measurement import MeasurementRecord, MetricComparison, Provenance, SampleSummary
from sglperf.model.metrics import MetricOutcome
from sglperf.model.verdict import Status, Verdict


def measurement(
    run_id: str | None, decode: float, *, regressed: bool = False, key: str = "qwen36-mtp1-chat-c1"
) -> MeasurementRecord:
    comparisons = (
        [
            MetricComparison(
                metric="decode_tok_s",
                baseline_median=70.0,
                current_median=decode,
                change=decode / 70.0 - 1,
                threshold=0.03,
                p_value=0.001,
                outcome=MetricOutcome.REGRESSION,
                message="",
                n_baseline=3,
                n_current=3,
            )
        ]
        if regressed
        else []
    )
    return MeasurementRecord(
        key=key,
        run_id=run_id,
        deployment="qwen36",
        variant="mtp1",
        workload="chat",
        concurrency=1,
        emulated=False,
        sglang_version="0.5.23",
        provenance=Provenance(
            sglang_version="0.5.23",
            runner="2xA6000",
            date="2026-01-01T00:00:00+00:00",
            effective_args_digest="digest-a" if not regressed else "digest-b",
            launch_command="python -m sglang.launch_server",
        ),
        samples={"decode_tok_s": [decode] * 3},
        summary={"decode_tok_s": SampleSummary(n=3, median=decode, p10=decode, p90=decode)},
        baseline="baselines/qwen36/mtp1.json",
        comparisons=comparisons,
    )


def verdict(status: Status = Status.PASS) -> Verdict:
    return Verdict("qwen36", "mtp1", "prefill_cuda_graph", "on", "on", status, "detail", "0.5.23")


def stored_run(
    run_id: str, day: int, decode: float = 70.0, *, regressed: bool = False, status: Status = Status.PASS
) -> StoredRun:
    ident = RunIdentity(
        run_id=run_id,
        recorded_at=f"2026-01-{day:02d}T00:00:00+00:00",
        runner="2xA6000",
        gpus="2x NVIDIA RTX A6000",
        sglang_version="0.5.23",
        args_digest="digest-a",
        deployment_commit="abc123",
        emulated=False,
        source="/results/x",
    )
    return StoredRun(ident, (measurement(run_id, decode, regressed=regressed),), (verdict(status),))
