"""Preflight of a deployment: plan each variant's argv for the release, resolve it, judge every intent."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sglperf.judge import coverage
from sglperf.judge.intent import explain, judge, judge_error, not_applicable
from sglperf.model.deployment import Deployment, Variant
from sglperf.model.intent_names import DECODE_CUDA_GRAPH, PREFILL_CUDA_GRAPH
from sglperf.model.resolution import Resolution
from sglperf.model.verdict import Verdict
from sglperf.preflight.resolver import Resolver
from sglperf.sglang.argv import ParsedArgv, ParserInfo
from sglperf.sglang.flags import SKIP_TOKENIZER_FLAG, FlagError, LaunchPlan, launch_plan, prefill_coverage_need
from sglperf.sglang.intents import (
    DECODE_GRAPH,
    INTENTS,
    PREFILL_GRAPH,
    Intent,
    IntentNotExpressible,
)

PREFLIGHT_FLAGS = (SKIP_TOKENIZER_FLAG,)


@dataclass
class VariantCheck:
    """Everything preflight learnt about one variant."""

    deployment: Deployment
    variant: Variant
    launch: LaunchPlan | None
    resolution: Resolution | None
    verdicts: list[Verdict] = field(default_factory=list)


def config_digest(deployment: Deployment) -> str:
    return hashlib.sha256(deployment.config_path.read_bytes()).hexdigest()


def check(deployment: Deployment, resolver: Resolver, variant_ids: Sequence[str] | None = None) -> list[VariantCheck]:
    """Plan, resolve and judge every (selected) variant of a deployment with one SGLang release."""
    release = resolver.release()
    hf_config = deployment.hf_config()
    architectures = deployment.architectures
    model_dir = str(deployment.config_path.parent)
    checks: list[VariantCheck] = []
    for variant in deployment.variants:
        if variant_ids is not None and variant.id not in variant_ids:
            continue
        try:
            launch = launch_plan(deployment, variant, release.parser, model_dir, architectures, on_runner=False)
        except FlagError as exc:
            verdicts = [
                judge_error(deployment.key, variant.id, name, expected, release.version, str(exc))
                for name, expected in deployment.expectations_for(variant).items()
            ]
            checks.append(VariantCheck(deployment, variant, None, None, verdicts))
            continue
        checks.append(VariantCheck(deployment, variant, launch, None))

    planned = [c for c in checks if c.launch is not None]
    jobs = [((*c.launch.argv, *PREFLIGHT_FLAGS), c.launch.env) for c in planned if c.launch]
    # What SGLang would decide without each boolean request: when it differs, the request overrides one
    # of SGLang's own rules, and the verdict carries that rule's words as a caveat.
    unasked: list[tuple[VariantCheck, str, LaunchPlan]] = []
    for c in planned:
        for name, value in c.variant.request.items():
            if isinstance(value, bool):
                without = c.variant.model_copy(
                    update={"request": {k: v for k, v in c.variant.request.items() if k != name}}
                )
                try:
                    unasked.append(
                        (
                            c,
                            name,
                            launch_plan(deployment, without, release.parser, model_dir, architectures, on_runner=False),
                        )
                    )
                except FlagError:
                    continue
    jobs += [((*p.argv, *PREFLIGHT_FLAGS), p.env) for _, _, p in unasked]
    resolved = resolver.resolve(jobs, salt=config_digest(deployment))
    caveats: dict[tuple[str, str], tuple[str, ...]] = {}
    for (c, name, _), resolution in zip(unasked, resolved[len(planned) :]):
        found = _overridden_rule(INTENTS[name], c.variant.request[name], resolution, release.parser, c.launch)
        if found:
            caveats[(c.variant.id, name)] = found
    for c, resolution in zip(planned, resolved):
        c.resolution = resolution
        assert c.launch is not None
        for name, expected in deployment.expectations_for(c.variant).items():
            intent = INTENTS[name]
            verdict = judge(
                deployment.key,
                c.variant.id,
                intent,
                expected,
                resolution.effective_args,
                release.version,
                error=resolution.error,
                requested=name in c.variant.request,
                hint=_hint(intent.name, expected, release.parser, architectures),
                conflict=_own_flag_conflict(intent, expected, deployment, c.variant, release.parser),
                warnings=c.launch.warnings,
                caveats=caveats.get((c.variant.id, name), ()),
            )
            verdict = not_applicable(verdict, hf_config)
            args = resolution.effective_args
            if name == DECODE_CUDA_GRAPH and args is not None:
                own = DECODE_GRAPH.own_size_flags(ParsedArgv(c.launch.argv, release.parser))
                verdict = coverage.judge_coverage(
                    verdict,
                    coverage.captured_in_args(args),
                    coverage.workload_batches(deployment, coverage.max_running(args)),
                    how_to_raise=_coverage_hint(deployment, c.variant, release.parser, own),
                )
            if name == PREFILL_CUDA_GRAPH and args is not None:
                verdict = coverage.judge_prefill_coverage(
                    verdict,
                    coverage.captured_in_args(args, PREFILL_GRAPH),
                    coverage.prefill_needs(deployment, args.fields),
                    how_to_raise=_prefill_coverage_hint(deployment, c.variant, release.parser, c.launch.argv),
                    own_flags=PREFILL_GRAPH.own_size_flags(ParsedArgv(c.launch.argv, release.parser)),
                )
            c.verdicts.append(verdict)
    return checks


def _coverage_hint(deployment: Deployment, variant: Variant, parser: ParserInfo, own_flags: str) -> str:
    """How to have the decode graph captured up to the workloads' batch on this release."""
    need = deployment.largest_in_flight()
    if need is None:
        return ""
    try:
        argv = DECODE_GRAPH.coverage_flags(need, parser, deployment.runner.is_cpu)
    except IntentNotExpressible as exc:
        return f"this release cannot raise it: {exc}"
    return _raise_hint(DECODE_CUDA_GRAPH, argv, variant, parser, own_flags)


def _prefill_coverage_hint(deployment: Deployment, variant: Variant, parser: ParserInfo, argv: Sequence[str]) -> str:
    """How to have the prefill graph captured up to the workloads' longest prompt on this release."""
    need = prefill_coverage_need(deployment)
    try:
        raise_argv = PREFILL_GRAPH.coverage_flags(need or PREFILL_GRAPH.CAPTURE_STEP, parser)
    except IntentNotExpressible as exc:
        return f"this release cannot raise it: {exc}"
    if need is None:
        # A prompt file's length is known in bytes only: the user picks the size.
        return f"raise it: {raise_argv[0]} N in the variant's args, N the longest prompt in tokens"
    return _raise_hint(
        PREFILL_CUDA_GRAPH, raise_argv, variant, parser, PREFILL_GRAPH.own_size_flags(ParsedArgv(argv, parser))
    )


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


def _hint(intent_name: str, expected: Any, parser: ParserInfo, architectures: tuple[str, ...]) -> str:
    """How to ask for an intent on this release, for failure messages."""
    if isinstance(expected, bool):
        try:
            argv = INTENTS[intent_name].flags(expected, parser, architectures)
        except IntentNotExpressible:
            return ""
        spelled = f" (on SGLang {parser.version} that adds {' '.join(argv)})" if argv else ""
        return f"ask for it: request = {{ {intent_name} = {str(expected).lower()} }} in the variant{spelled}"
    return ""
