"""Live effective args: what a running server says about itself, checked with the preflight's code.

The same intents and the same judge as preflight, on `/server_info`, plus evidence only a running
server has: per-phase CUDA graph memory, the server's log lines, and weight memory per GPU compared
with the model's text-only and full sizes (a flag is not proof that the vision tower was skipped).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sglperf.judge import coverage
from sglperf.judge.intent import judge, not_applicable
from sglperf.model.checkpoint import CheckpointFacts
from sglperf.model.graph_coverage import CapturedSizes, WorkloadBatch, WorkloadPrefill
from sglperf.model.intent_names import DECODE_CUDA_GRAPH, PREFILL_CUDA_GRAPH, VISION_WEIGHTS_SKIPPED
from sglperf.model.resolution import EffectiveArgs, LogLine, ModelFacts, strip_ansi
from sglperf.model.server_facts import DECODE_GRAPH_SIZES_FIELD, ServerFacts
from sglperf.model.verdict import Status, Verdict
from sglperf.sglang import weight_memory
from sglperf.sglang.intents import INTENTS, PREFILL_GRAPH, Intent, Speculative

LOG_LEVEL = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")


def parse_log(text: str) -> tuple[LogLine, ...]:
    lines = []
    for raw in text.splitlines():
        if raw.startswith("# sglperf:"):
            continue  # our own launch/stop notes, not the server's words
        level = LOG_LEVEL.search(raw)
        clean = strip_ansi(raw).strip()
        lines.append(LogLine(level.group(1) if level else "INFO", "server-log", clean))
    return tuple(lines)


def _prefill_graph_evidence(verdict: Verdict, facts: ServerFacts) -> Verdict:
    graph = facts.graph_memory
    if graph is None or "prefill" not in graph:
        return replace(
            verdict, reasons=(*verdict.reasons, "no per-phase graph memory on this release (0.5.17+ reports it)")
        )
    evidence = f"internal_states[0].memory_usage.graph.prefill = {graph['prefill']:.2f} GB"
    if verdict.status == Status.PASS and verdict.expected == "on" and graph["prefill"] <= 0:
        return replace(
            verdict,
            status=Status.FAIL,
            actual="on in args, no graph captured",
            detail=f"{verdict.detail}; but {evidence}: the prefill CUDA graph was never captured",
        )
    return replace(verdict, detail=f"{verdict.detail}; {evidence}")


@dataclass(frozen=True)
class LiveCoverage:
    """What the graphs must cover: the workloads' decode batches and prefills, and the sizes and rules
    preflight resolved (a rule is quoted when the server has the same largest size)."""

    batches: Sequence[WorkloadBatch]
    predicted: CapturedSizes | None = None
    prefills: Sequence[WorkloadPrefill] = ()
    predicted_prefill: CapturedSizes | None = None


def _prefill_coverage(verdict: Verdict, facts: ServerFacts, wanted: LiveCoverage) -> Verdict:
    """The token sizes the server's own args say its prefill graph has, held against the workloads."""
    found = PREFILL_GRAPH.captured_sizes(facts.effective)
    if found is None:
        return verdict
    sizes, source = found
    predicted = wanted.predicted_prefill
    rule = predicted.rule if predicted and predicted.largest == sizes[-1] else None
    how = f"raise it: request = {{ {PREFILL_CUDA_GRAPH} = true }} in the variant (preflight spells it for the release)"
    return coverage.judge_prefill_coverage(
        verdict, CapturedSizes(sizes, f"/server_info {source}", rule), wanted.prefills, how_to_raise=how
    )


def _decode_coverage(verdict: Verdict, sizes: tuple[int, ...], wanted: LiveCoverage) -> Verdict:
    """The server's own captured sizes held against the workloads (`judge.coverage`)."""
    if not sizes:
        return verdict
    rule = wanted.predicted.rule if wanted.predicted and wanted.predicted.largest == max(sizes) else None
    captured = CapturedSizes(tuple(sorted(sizes)), f"internal_states[0].{DECODE_GRAPH_SIZES_FIELD}", rule)
    how = f"raise it: request = {{ {DECODE_CUDA_GRAPH} = true }} in the variant (preflight spells it for the release)"
    return coverage.judge_coverage(verdict, captured, wanted.batches, how_to_raise=how)


def _decode_graph_evidence(verdict: Verdict, facts: ServerFacts) -> Verdict:
    """The decode graph the server captured: ``internal_states[..].decode_cuda_graph_bs``. Args can say
    "full" where nothing runs (on a CPU server the backend is not what decides), so a server whose args
    say on but that captured no decode graph fails."""
    graph = facts.decode_graph
    if graph is None:
        return replace(
            verdict, reasons=(*verdict.reasons, "the server reports no captured decode graph sizes on this release")
        )
    sizes, memory = graph
    shown = f"[{', '.join(map(str, sizes))}]" if len(sizes) <= 8 else f"{len(sizes)} sizes [{sizes[0]}..{sizes[-1]}]"
    evidence = f"internal_states[0].{DECODE_GRAPH_SIZES_FIELD} = {shown}" + (
        f", decode_cuda_graph_memory_gb = {memory:.2f}" if memory is not None else ""
    )
    if verdict.status == Status.PASS and verdict.expected == "on" and not sizes:
        return replace(
            verdict,
            status=Status.FAIL,
            actual="on in args, no graph captured",
            detail=f"{verdict.detail}; but {evidence}: no decode graph was captured",
        )
    if verdict.status == Status.PASS and verdict.expected == "off" and sizes:
        return replace(
            verdict,
            status=Status.FAIL,
            actual="off in args, graph captured",
            detail=f"{verdict.detail}; but {evidence}: a decode graph was captured",
        )
    return replace(verdict, detail=f"{verdict.detail}; {evidence}")


def _vision_evidence(
    verdict: Verdict, facts: ServerFacts, config: Mapping[str, Any], tp: int, mtp_loaded: bool, proven: bool
) -> Verdict:
    """Weight memory per GPU against the model's sizes. ``proven``: the verdict already rests on the
    model class as preflight built it; memory then confirms it or, when it contradicts, wins."""
    measured = facts.weight_gib
    if measured is None:
        kept = verdict.status if proven or verdict.status.failed else Status.UNPROVEN
        return replace(verdict, status=kept, detail=f"{verdict.detail}; the server reports no weight memory")
    try:
        size = CheckpointFacts(config).size()
    except ValueError as exc:
        return replace(verdict, detail=f"{verdict.detail}; cannot size the model from config.json: {exc}")
    evidence = weight_memory.classify_weight_memory(measured, size, tp, mtp_loaded=mtp_loaded)
    if evidence.verdict == "loaded" and verdict.status == Status.INERT:
        return replace(verdict, detail=f"{verdict.detail}; {evidence.detail}")  # the flag did nothing, as predicted
    if evidence.verdict == "unclear" and proven:
        return replace(verdict, detail=f"{verdict.detail}; weight memory cannot tell: {evidence.detail}")
    if evidence.verdict == "skipped":
        status, actual = (
            (Status.PASS, "skipped (weight memory)") if verdict.expected == "on" else (Status.FAIL, "skipped")
        )
    elif evidence.verdict == "loaded":
        status, actual = (
            (Status.FAIL, "loaded (weight memory)") if verdict.expected == "on" else (Status.PASS, "loaded")
        )
        if verdict.expected == "on" and verdict.actual and verdict.actual.startswith("on"):
            actual = "flag set, but the vision tower was loaded"
    else:
        status, actual = Status.UNPROVEN, "unclear"
    return replace(verdict, status=status, actual=actual, detail=f"{verdict.detail}; {evidence.detail}")


def check(
    deployment_key: str,
    variant_id: str,
    expectations: Mapping[str, Any],
    facts: ServerFacts,
    log_text: str,
    *,
    config: Mapping[str, Any],
    tp: int,
    requested: Sequence[str] = (),
    warnings: Sequence[str] = (),
    model: ModelFacts | None = None,
    graph_coverage: LiveCoverage | None = None,
) -> list[Verdict]:
    """Judge every expected intent on a running server, adding live evidence where SGLang offers it.

    ``model``: what the model class builds, as preflight constructed it for the same variant (a server
    cannot be asked; the drift item checks that its args are the ones preflight predicted)."""
    args = EffectiveArgs(facts.effective, parse_log(log_text), model=model)
    verdicts = []
    for name, expected in expectations.items():
        intent: Intent = INTENTS[name]
        verdict = judge(
            deployment_key,
            variant_id,
            intent,
            expected,
            args,
            facts.version,
            requested=name in requested,
            warnings=warnings,
            tier="live (emulator)" if facts.emulated else "live",
        )
        if verdict.status != Status.ERROR:
            if name == PREFILL_CUDA_GRAPH:
                verdict = _prefill_graph_evidence(verdict, facts)
                if graph_coverage is not None:
                    verdict = _prefill_coverage(verdict, facts, graph_coverage)
            elif name == DECODE_CUDA_GRAPH:
                verdict = _decode_graph_evidence(verdict, facts)
                if graph_coverage is not None and facts.decode_graph is not None:
                    verdict = _decode_coverage(verdict, facts.decode_graph[0], graph_coverage)
            elif name == VISION_WEIGHTS_SKIPPED:
                mtp = facts.effective.get(Speculative.FIELDS["algorithm"]) is not None
                verdict = _vision_evidence(verdict, facts, config, tp, mtp, proven=model is not None)
                verdict = not_applicable(verdict, config)
        verdicts.append(verdict)
    return verdicts
