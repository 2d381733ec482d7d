"""Decode graph coverage: an "on" decode graph held against the batches the workloads will run.

The graph replays only for batches up to the largest size it was captured for; every larger batch
decodes eager, every step, while args and /server_info say "on". SGLang picks that size by rules that
differ by release, GPU memory and parallelism (0.5.19 gave 20-35 GB GPUs with TP < 4 batch 24; 0.5.20
raised it to 48), so a deployment that was covered can stop being covered by an upgrade alone. Here
the verdict of ``decode_cuda_graph`` fails, naming each workload that outgrows the graph, the size,
the SGLang code that chose it and how to raise it; a covered variant passes with its size shown, so an
upgrade check sees the size move.

The decode batch is counted in requests on every path: with speculative decoding the verify graph is
captured per request too (each request carrying its draft tokens), so the same comparison holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sglperf.model.deployment import Deployment
from sglperf.model.graph_coverage import CapturedSizes, CaptureRule, CoverageGap, WorkloadBatch
from sglperf.model.resolution import EffectiveArgs, Write
from sglperf.model.verdict import Status, Verdict
from sglperf.sglang.intents import DECODE_GRAPH as DECODE


def workload_batches(deployment: Deployment, max_running: int | None = None) -> list[WorkloadBatch]:
    """The largest decode batch of every workload at every load point with a bound (closed loop: its
    concurrency; open loop: its ``max_concurrency``; an open loop without one has no bound to hold the
    graph against), capped by the server's ``max_running_requests`` where that is known."""
    batches = []
    for workload in deployment.workloads:
        for load in workload.load_points():
            if load.concurrency is None:
                continue
            batch, bounded_by = load.concurrency, ""
            if max_running is not None and max_running < batch:
                batch, bounded_by = max_running, f"{DECODE.MAX_RUNNING_FIELD} = {max_running}"
            batches.append(WorkloadBatch(workload.id, load.describe(), batch, bounded_by))
    return batches


def max_running(args: EffectiveArgs) -> int | None:
    value = args.fields.get(DECODE.MAX_RUNNING_FIELD)
    return value if isinstance(value, int) and value > 0 else None


def _rule_of(write: Write) -> CaptureRule:
    return CaptureRule(write.rule, write.where, write.code, write.conditions, write.comment)


def _sets(write: Write, largest: int) -> bool:
    new = write.new
    if isinstance(new, list):
        return bool(new) and all(isinstance(v, int) for v in new) and max(new) == largest
    return isinstance(new, int) and new == largest


def capture_rule(args: EffectiveArgs, largest: int) -> CaptureRule | None:
    """The SGLang code that set the largest size: the last write of the cap that set this value (a traced
    statement before a declared value), else of the size list, else the release's own record of which
    function declared the graph config."""
    changed = [w for w in args.writes if w.changed]
    # A traced statement (file:line) says more than a declaring function's name: those first.
    for fields in (DECODE.MAX_BS_FIELDS, DECODE.SIZES_FIELDS):
        for traced in (True, False):
            for write in reversed(changed):
                if write.field in fields and bool(write.where) == traced and _sets(write, largest):
                    return _rule_of(write)
    for write in reversed(changed):
        if isinstance(write.new, dict):
            sizes = DECODE.captured_sizes({write.field: write.new})
            if sizes is not None and sizes[0][-1] == largest:
                return _rule_of(write)
    return None


def captured_in_args(args: EffectiveArgs) -> CapturedSizes | None:
    """The decode graph's sizes as the release resolves them, with the rule that set the largest."""
    found = DECODE.captured_sizes(args.fields)
    if found is None:
        return None
    sizes, source = found
    return CapturedSizes(sizes, source, capture_rule(args, sizes[-1]))


def find_gaps(captured: CapturedSizes, batches: Sequence[WorkloadBatch]) -> list[CoverageGap]:
    return [CoverageGap(b, captured) for b in batches if not captured.covers(b.batch)]


def judge_coverage(
    verdict: Verdict,
    captured: CapturedSizes | None,
    batches: Sequence[WorkloadBatch],
    *,
    how_to_raise: str = "",
) -> Verdict:
    """The ``decode_cuda_graph`` verdict of a variant whose graph is on, held against the workloads."""
    if captured is None or verdict.status != Status.PASS or verdict.expected != "on":
        return verdict
    gaps = find_gaps(captured, batches)
    if not gaps:
        return replace(verdict, actual=f"{verdict.actual}, up to batch {captured.largest}")
    set_by = f"set by {captured.rule.describe()}" if captured.rule else f"read from {captured.source}"
    raise_it = f"; {how_to_raise}" if how_to_raise else ""
    lines = [
        f"{g.need.describe()} decodes eager: SGLang {verdict.sglang_version} captures the decode graph up to "
        f"batch {captured.largest}, below the workload's {g.need.batch}, {set_by}{raise_it}"
        for g in gaps
    ]
    return replace(
        verdict,
        status=Status.FAIL,
        actual=f"{verdict.actual}, up to batch {captured.largest}: eager above",
        detail="\n  ".join([verdict.detail, *lines]),
    )
