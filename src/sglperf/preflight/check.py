"""Preflight of a deployment: plan each variant's argv for the release, resolve it, judge every intent."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sglperf.judge.intent import judge, judge_error
from sglperf.model.deployment import Deployment, Variant
from sglperf.model.resolution import Resolution
from sglperf.model.verdict import Verdict
from sglperf.preflight.resolver import Resolver
from sglperf.sglang.flags import SKIP_TOKENIZER_FLAG, FlagError, LaunchPlan, plan
from sglperf.sglang.intents import INTENTS, ParserInfo

PREFLIGHT_FLAGS = (SKIP_TOKENIZER_FLAG,)


@dataclass
class VariantCheck:
    """Everything preflight learnt about one variant."""

    deployment: Deployment
    variant: Variant
    plan: LaunchPlan | None
    resolution: Resolution | None
    verdicts: list[Verdict] = field(default_factory=list)


def _config_digest(deployment: Deployment) -> str:
    return hashlib.sha256(deployment.config_path.read_bytes()).hexdigest()


def check(deployment: Deployment, resolver: Resolver, variant_ids: Sequence[str] | None = None) -> list[VariantCheck]:
    """Plan, resolve and judge every (selected) variant of a deployment with one SGLang release."""
    release = resolver.release()
    architectures = deployment.architectures
    model_dir = str(deployment.config_path.parent)
    checks: list[VariantCheck] = []
    for variant in deployment.variants:
        if variant_ids is not None and variant.id not in variant_ids:
            continue
        try:
            launch = plan(deployment, variant, release.parser, model_dir, architectures)
        except FlagError as exc:
            verdicts = [
                judge_error(deployment.key, variant.id, name, expected, release.version, str(exc))
                for name, expected in deployment.expectations_for(variant).items()
            ]
            checks.append(VariantCheck(deployment, variant, None, None, verdicts))
            continue
        checks.append(VariantCheck(deployment, variant, launch, None))

    planned = [c for c in checks if c.plan is not None]
    jobs = [((*c.plan.argv, *PREFLIGHT_FLAGS), c.plan.env) for c in planned if c.plan]
    for c, resolution in zip(planned, resolver.resolve(jobs, salt=_config_digest(deployment))):
        c.resolution = resolution
        assert c.plan is not None
        for name, expected in deployment.expectations_for(c.variant).items():
            intent = INTENTS[name]
            c.verdicts.append(
                judge(
                    deployment.key,
                    c.variant.id,
                    intent,
                    expected,
                    resolution.effective_args,
                    release.version,
                    error=resolution.error,
                    requested=name in c.variant.request,
                    hint=_hint(intent.name, expected, release.parser, architectures),
                    warnings=c.plan.warnings,
                )
            )
    return checks


def _hint(intent_name: str, expected: Any, parser: ParserInfo, architectures: tuple[str, ...]) -> str:
    """How to ask for an intent on this release, for failure messages."""
    if isinstance(expected, bool):
        try:
            argv = INTENTS[intent_name].flags(expected, parser, architectures)
        except Exception:
            return ""
        spelled = f" (on SGLang {parser.version} that adds {' '.join(argv)})" if argv else ""
        return f"ask for it: request = {{ {intent_name} = {str(expected).lower()} }} in the variant{spelled}"
    return ""
