"""Preflight's verdicts: every intent of each variant judged against what the release resolved for it
(`resolve`), with SGLang's rules a request overrides as caveats, the graphs' coverage of the workloads, and
how to ask for what is missing on this release."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sglperf.judge import coverage
from sglperf.judge.intent import REASON_LEVELS, explain, is_about, judge, judge_error, not_applicable
from sglperf.model.deployment import Deployment, Variant
from sglperf.model.graph_coverage import graph_needs
from sglperf.model.intent_names import DECODE_CUDA_GRAPH, PREFILL_CUDA_GRAPH
from sglperf.model.resolution import Resolution
from sglperf.model.verdict import Verdict
from sglperf.preflight.resolve import ResolvedVariant, Resolves, resolve_variants
from sglperf.sglang.argv import ParsedArgv, ParserInfo
from sglperf.sglang.flags import LaunchPlan
from sglperf.sglang.intents import (
    DECODE_GRAPH,
    INTENTS,
    PREFILL_GRAPH,
    Intent,
    IntentNotExpressible,
)
from sglperf.sglang.server_api import RANK_SPECIFIC_FIELDS


@dataclass
class VariantCheck:
    """Everything preflight learnt about one variant."""

    deployment: Deployment
    variant: Variant
    launch: LaunchPlan | None
    resolution: Resolution | None
    verdicts: list[Verdict] = field(default_factory=list)
    # A multi-node role: how ranks 1.. resolve differently from rank 0, one line each (empty: the same); None for
    # a single-node variant, where there is nothing to compare.
    rank_drift: list[str] | None = None


def check(deployment: Deployment, resolver: Resolves, variant_ids: Sequence[str] | None = None) -> list[VariantCheck]:
    """Resolve and judge every (selected) variant of a deployment with one SGLang release."""
    parser = resolver.release().parser
    return [judge_variant(resolved, parser) for resolved in resolve_variants(deployment, resolver, variant_ids)]


def judge_variant(resolved: ResolvedVariant, parser: ParserInfo) -> VariantCheck:
    """Every expectation of one resolved variant, judged."""
    deployment, variant, launch, resolution = (
        resolved.deployment,
        resolved.variant,
        resolved.launch,
        resolved.resolution,
    )
    expectations = deployment.expectations_for(variant)
    if launch is None or resolution is None:
        message = resolved.plan_error or "its flags could not be planned for this release"
        verdicts = [
            judge_error(deployment.key, variant.id, name, expected, parser.version, message)
            for name, expected in expectations.items()
        ]
        return VariantCheck(deployment, variant, None, None, verdicts)
    hf_config = deployment.hf_config()
    architectures = deployment.architectures
    own = ParsedArgv(launch.argv, parser)
    c = VariantCheck(deployment, variant, launch, resolution, rank_drift=rank_drift(resolution, resolved.ranks))
    for name, expected in expectations.items():
        intent = INTENTS[name]
        unasked = resolved.unasked.get(name)
        caveats = _overridden_rule(intent, variant.request[name], unasked, parser, launch) if unasked else ()
        verdict = judge(
            deployment.key,
            variant.id,
            intent,
            expected,
            resolution.effective_args,
            parser.version,
            error=resolution.error,
            requested=name in variant.request,
            hint=_hint(intent.name, expected, parser, architectures, _sglang_says(intent, resolution)),
            conflict=_own_flag_conflict(intent, expected, deployment, variant, parser),
            warnings=launch.warnings,
            caveats=caveats,
        )
        verdict = not_applicable(verdict, hf_config)
        args = resolution.effective_args
        if name == DECODE_CUDA_GRAPH and args is not None:
            verdict = coverage.judge_coverage(
                verdict,
                coverage.captured_in_args(args),
                coverage.workload_batches(deployment, args.fields, variant),
                how_to_raise=_coverage_hint(deployment, variant, parser, DECODE_GRAPH.own_size_flags(own)),
            )
        if name == PREFILL_CUDA_GRAPH and args is not None:
            verdict = coverage.judge_prefill_coverage(
                verdict,
                coverage.captured_in_args(args, PREFILL_GRAPH),
                coverage.prefill_needs(deployment, args.fields),
                how_to_raise=_prefill_coverage_hint(deployment, variant, parser, own),
                own_flags=PREFILL_GRAPH.own_size_flags(own),
            )
        c.verdicts.append(verdict)
    return c


def _coverage_hint(deployment: Deployment, variant: Variant, parser: ParserInfo, own_flags: str) -> str:
    """How to have the decode graph captured up to the workloads' batch on this release."""
    need = graph_needs(deployment, variant).largest_in_flight()
    if need is None:
        return ""
    try:
        argv = DECODE_GRAPH.coverage_flags(need, parser, deployment.runner.is_cpu)
    except IntentNotExpressible as exc:
        return f"this release cannot raise it: {exc}"
    return _raise_hint(DECODE_CUDA_GRAPH, argv, variant, parser, own_flags)


def _prefill_coverage_hint(deployment: Deployment, variant: Variant, parser: ParserInfo, argv: ParsedArgv) -> str:
    """How to have the prefill graph captured up to the workloads' longest prompt on this release."""
    need = graph_needs(deployment).prefill_capture_need()
    try:
        raise_argv = PREFILL_GRAPH.coverage_flags(need or PREFILL_GRAPH.CAPTURE_STEP, parser)
    except IntentNotExpressible as exc:
        return f"this release cannot raise it: {exc}"
    if need is None:
        # A prompt file's length is known in bytes only: the user picks the size.
        return f"raise it: {raise_argv[0]} N in the variant's args, N the longest prompt in tokens"
    return _raise_hint(PREFILL_CUDA_GRAPH, raise_argv, variant, parser, PREFILL_GRAPH.own_size_flags(argv))


def _raise_hint(intent: str, argv: Sequence[str], variant: Variant, parser: ParserInfo, own_flags: str) -> str:
    spelled = f"on SGLang {parser.version} that adds {' '.join(argv)}"
    request = f"request = {{ {intent} = true }}"
    if own_flags:
        # The variant's own sizes win over a request (sglang.flags adds nothing beside them).
        return (
            f"the variant's own flags fix the sizes ({own_flags}): raise them, or drop them for {request} ({spelled})"
        )
    if variant.request.get(intent) is True:
        return f"the variant asks for coverage ({spelled}), and SGLang still stops below"
    return f"raise it: {request} in the variant ({spelled})"


# Words with which SGLang's help texts warn about a flag ("(for testing)", "experimental", ...).
CAUTION_WORDS = ("test", "experimental", "unsafe", "not recommended", "caution", "may ")


def _overridden_rule(
    intent: Intent, requested: bool, unasked: Resolution, parser: ParserInfo, asked: LaunchPlan | None
) -> tuple[str, ...]:
    """SGLang's own words for the rule a request overrides, if without it SGLang decides otherwise."""
    args = unasked.effective_args
    if args is None:
        return ()
    try:
        default = intent.read(args.fields, args.model).value
    except KeyError:
        return ()
    if intent.matches(requested, default):
        return ()  # SGLang does this anyway: nothing is overridden
    words = [f"without the request SGLang decides {intent.show(default)}: {r}" for r in explain(intent, args, default)]
    for flag in _added_flags(asked, intent, parser):
        help_text = parser.options[flag].help if flag in parser.options else ""
        if any(w in help_text.lower() for w in CAUTION_WORDS):
            words.append(f"SGLang's help for {flag}: {' '.join(help_text.split())[:200]}")
    # No rule and no caution: the request merely turns on what is off by default; nothing to say.
    return tuple(words)


def _added_flags(asked: LaunchPlan | None, intent: Intent, parser: ParserInfo) -> list[str]:
    if asked is None:
        return []
    return [o.name for o in ParsedArgv(asked.argv, parser).among(intent.flag_names)]


def _own_flag_conflict(
    intent: Intent, expected: Any, deployment: Deployment, variant: Variant, parser: ParserInfo
) -> str:
    """Advice when the user's own flags set the intent against the expectation: the conflict is in their
    file, and asking SGLang for the intent would only add a flag that contradicts theirs."""
    if not isinstance(expected, bool):
        return ""
    for where, flags in (
        ("the variant's own flags", variant.flags),
        ("the deployment's [launch] extra_flags", deployment.launch.extra_flags),
    ):
        for option in ParsedArgv(flags, parser):
            flag = option.name
            if flag in intent.known_flags and bool(intent.known_flags[flag]) != expected:
                turns = "on" if intent.known_flags[flag] else "off"
                written = option.written if option.written == flag else f"{option.written} (SGLang reads {flag})"
                return (
                    f"{written} in {where} turns it {turns}: remove it there, or put expect = {{ {intent.name} = "
                    f"{str(not expected).lower()} }} in this variant"
                )
    return ""


def _hint(
    intent_name: str, expected: Any, parser: ParserInfo, architectures: tuple[str, ...], sglang_says: str = ""
) -> str:
    """How to ask for an intent on this release, for failure messages. Where SGLang states why it decided
    otherwise (a warning about the intent), its words come first: advice never contradicts them unsaid."""
    if not isinstance(expected, bool):
        return ""
    try:
        argv = INTENTS[intent_name].flags(expected, parser, architectures)
    except IntentNotExpressible:
        return ""
    spelled = f" (on SGLang {parser.version} that adds {' '.join(argv)})" if argv else ""
    request = f"request = {{ {intent_name} = {str(expected).lower()} }} in the variant{spelled}"
    if sglang_says:
        return f'SGLang says why: "{sglang_says}"; to override its reason anyway: {request}'
    return f"ask for it: {request}"


def _sglang_says(intent: Intent, resolution: Resolution) -> str:
    """SGLang's own warning about the intent, the first, as it printed it."""
    said = [
        line.message.strip()
        for line in resolution.logs
        if line.level in REASON_LEVELS and is_about(intent, line.message)
    ]
    return said[0][:240] if said else ""


def rank_drift(rank0: Resolution, others: Sequence[Resolution]) -> list[str] | None:
    """What ranks 1.. of a multi-node instance resolve differently from rank 0 (their own rank, rendezvous and
    addresses aside): every rank must decide alike, or the instance runs mismatched collectives."""
    if not others:
        return None
    lines = []
    ours = rank0.effective or {}
    for rank, resolution in enumerate(others, start=1):
        if resolution.effective is None:
            why = resolution.error.message.splitlines()[0] if resolution.error else "no effective config"
            lines.append(f"rank {rank}: SGLang refuses it: {why}")
            continue
        theirs = resolution.effective
        for name in sorted((set(ours) | set(theirs)) - RANK_SPECIFIC_FIELDS):
            if ours.get(name) != theirs.get(name):
                lines.append(f"rank {rank}: {name} = {theirs.get(name)!r}, rank 0: {ours.get(name)!r}"[:300])
    return lines
