"""Graph coverage: an "on" decode graph held against the batches the workloads will run, and an "on"
prefill graph against their prompts.

The graph replays only for batches up to the largest size it was captured for; every larger batch
decodes eager, every step, while args and /server_info say "on". SGLang picks that size by rules that
differ by release, GPU memory and parallelism (0.5.19 gave 20-35 GB GPUs with TP < 4 batch 24; 0.5.20
raised it to 48), so a deployment that was covered can stop being covered by an upgrade alone. Here
the verdict of ``decode_cuda_graph`` fails, naming each workload that outgrows the graph, the size,
the SGLang code that chose it and how to raise it; a covered variant passes with its size shown, so an
upgrade check sees the size move.

The prefill graph is the same in tokens: SGLang captures it up to a token count (the chunked prefill
size by default, lower for MLA models, Llama-2 paths, a small KV pool or pipeline parallelism), and a
prefill longer than that runs eager. A workload's prefill is its longest prompt, cut to the chunked
prefill size.

The decode batch is counted in requests on every path: with speculative decoding the verify graph is
captured per request too (each request carrying its draft tokens), so the same comparison holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sglperf.model.deployment import Deployment, Variant
from sglperf.model.graph_coverage import (
    CapturedSizes,
    CoverageGap,
    WorkloadBatch,
    WorkloadPrefill,
    graph_needs,
    load_batch,
)
from sglperf.model.resolution import EffectiveArgs, Write
from sglperf.model.verdict import Status, Verdict
from sglperf.model.workload import LoadPoint, Workload
from sglperf.sglang.intents import DECODE_GRAPH as DECODE
from sglperf.sglang.intents import PREFILL_GRAPH as PREFILL
from sglperf.sglang.intents import DecodeCudaGraph, PrefillCudaGraph


def _positive_int(fields: Mapping[str, Any], name: str) -> int | None:
    value = fields.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def workload_batches(
    deployment: Deployment, fields: Mapping[str, Any], variant: Variant | None = None
) -> list[WorkloadBatch]:
    """The workloads' decode batches (`graph_needs`), capped by the server's ``max_running_requests`` as these
    effective args have it."""
    return graph_needs(deployment, variant).decode_batches(
        _positive_int(fields, DECODE.MAX_RUNNING_FIELD), DECODE.MAX_RUNNING_FIELD
    )


def measured_batch(
    workload: Workload, load: LoadPoint, prompts: int, fields: Mapping[str, Any], workers: int = 1
) -> WorkloadBatch | None:
    """The decode batch one load point's rounds run over ``prompts`` prompts (`load_batch`: what preflight's
    coverage holds the graph against), capped by ``max_running_requests`` as these effective args have it;
    None for an open loop without a cap."""
    batch = load_batch(workload, load, prompts)
    field = DECODE.MAX_RUNNING_FIELD
    return None if batch is None else batch.shared(workers).capped(_positive_int(fields, field), field)


def prefill_needs(deployment: Deployment, fields: Mapping[str, Any]) -> list[WorkloadPrefill]:
    """The workloads' longest prefills (`graph_needs`), cut to the chunked prefill size these effective args
    have."""
    field = PREFILL.CHUNK_FIELD
    return graph_needs(deployment).prefills_in_chunks(_positive_int(fields, field), field)


def _sets(write: Write, largest: int) -> bool:
    new = write.new
    if isinstance(new, list):
        return bool(new) and all(isinstance(v, int) for v in new) and max(new) == largest
    return isinstance(new, int) and new == largest


Graph = DecodeCudaGraph | PrefillCudaGraph


def capture_rule(args: EffectiveArgs, largest: int, graph: Graph = DECODE) -> Write | None:
    """The SGLang code that set the graph's largest size: the last write of the cap that set this value
    (a traced statement before a declared value), else of the size list, else the release's own record
    of which function declared the graph config."""
    changed = [w for w in args.writes if w.changed]
    cap_fields = graph.MAX_BS_FIELDS if isinstance(graph, DecodeCudaGraph) else graph.MAX_TOKENS_FIELDS
    # A traced statement (file:line) says more than a declaring function's name: those first.
    for fields in (cap_fields, graph.SIZES_FIELDS):
        for traced in (True, False):
            for write in reversed(changed):
                if write.field in fields and bool(write.where) == traced and _sets(write, largest):
                    return write
    for write in reversed(changed):
        if isinstance(write.new, dict):
            sizes = graph.captured_sizes({write.field: write.new})
            if sizes is not None and sizes[0][-1] == largest:
                return write
    return None


def captured_in_args(args: EffectiveArgs, graph: Graph = DECODE) -> CapturedSizes | None:
    """A graph's sizes as the release resolves them, with the rule that set the largest."""
    found = graph.captured_sizes(args.fields)
    if found is None:
        return None
    sizes, source = found
    return CapturedSizes(sizes, source, capture_rule(args, sizes[-1], graph))


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
        covered = replace(verdict, actual=f"{verdict.actual}, up to batch {captured.largest}")
        # Behind a router a worker runs its share: say which share was held against the graph.
        shared = [f"covers {b.describe()}" for b in batches if b.bounded_by.endswith(" workers")]
        return _with_lines(covered, Status.PASS, covered.actual or "", shared) if shared else covered
    set_by, raise_it = _set_by(captured), f"; {how_to_raise}" if how_to_raise else ""
    lines = [
        f"{g.need.describe()} decodes eager: SGLang {verdict.sglang_version} captures the decode graph up to "
        f"batch {captured.largest}, below the workload's {g.need.batch}, {set_by}{raise_it}"
        for g in gaps
    ]
    return _with_lines(verdict, Status.FAIL, f"{verdict.actual}, up to batch {captured.largest}: eager above", lines)


def judge_prefill_coverage(
    verdict: Verdict,
    captured: CapturedSizes | None,
    needs: Sequence[WorkloadPrefill],
    *,
    how_to_raise: str = "",
    own_flags: str = "",
) -> Verdict:
    """The ``prefill_cuda_graph`` verdict of a variant whose graph is on, held against the workloads'
    prompts: a prefill longer than the largest captured token size runs eager. A prompt file's bound
    (bytes) above the size proves nothing either way: unproven, for the measured rounds to decide.
    ``own_flags``: the variant's own size flags, which set the size whatever SGLang's rules say."""
    if captured is None or verdict.status != Status.PASS or verdict.expected != "on":
        return verdict
    over = [n for n in needs if not captured.covers(n.tokens)]
    largest = captured.largest
    if not over:
        return replace(verdict, actual=f"{verdict.actual}, up to {largest} tokens")
    set_by = f"set by the variant's own {own_flags}" if own_flags else _set_by(captured)
    raise_it = f"; {how_to_raise}" if how_to_raise else ""
    head = f"SGLang {verdict.sglang_version} captures the prefill graph up to {largest} tokens, {set_by}"
    exact = [n for n in over if n.exact]
    if exact:
        lines = [f"{n.describe()} run eager: {head}{raise_it}" for n in exact]
        return _with_lines(verdict, Status.FAIL, f"{verdict.actual}, up to {largest} tokens: eager above", lines)
    lines = [
        f"{n.describe()} may run eager: {head}; the measured rounds' prefill lines decide (synthetic prompts, "
        "counted in tokens, decide here)"
        for n in over
    ]
    return _with_lines(verdict, Status.UNPROVEN, f"{verdict.actual}, up to {largest} tokens", lines)


def _set_by(captured: CapturedSizes) -> str:
    return f"set by {captured.rule.describe()}" if captured.rule else f"read from {captured.source}"


def _with_lines(verdict: Verdict, status: Status, actual: str, lines: Sequence[str]) -> Verdict:
    """The verdict turned ``status``, one detail line per workload the graph does not cover."""
    return replace(verdict, status=status, actual=actual, detail="\n  ".join([verdict.detail, *lines]))
