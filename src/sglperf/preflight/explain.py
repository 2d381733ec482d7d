"""`sglperf explain`: every decision SGLang's resolution makes for a variant, with the rule that made it,
and, against another variant, what each of its flags really changed.

What a flag changed is measured, not inferred: the variant is resolved again without that flag and the
two effective configs compared. A flag whose only change is its own field was accepted and changed
nothing SGLang goes on to use.
"""

from __future__ import annotations

import dataclasses

from sglperf.judge.decisions import (
    config_and_model,
    decisions,
    differing_flags,
    field_changes,
)
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import DeploymentError
from sglperf.model.explanation import Explanation, FlagEffect, VariantComparison
from sglperf.model.resolution import FieldChange
from sglperf.preflight.resolve import PREFLIGHT_FLAGS, ResolvedVariant, Resolves, config_digest, resolve_variants
from sglperf.preflight.resolver import PreflightError
from sglperf.sglang.argv import ParsedArgv, ParserInfo
from sglperf.sglang.config_fields import ModelScope


def _failure(c: ResolvedVariant) -> str | None:
    if c.resolution is None:
        return c.plan_error or "its flags could not be planned for this release"
    if c.resolution.error is not None:
        return f"SGLang refused it: {c.resolution.error.type}: {c.resolution.error.message}"
    return None


def _asked_by(
    changes: list[FieldChange], reference: ResolvedVariant, c: ResolvedVariant, parser: ParserInfo
) -> list[FieldChange]:
    """Each change with the flags that asked for either side's value."""
    assert reference.resolution is not None and c.resolution is not None
    before = ParsedArgv(reference.resolution.argv, parser).asked()
    after = ParsedArgv(c.resolution.argv, parser).asked()
    return [
        dataclasses.replace(
            change,
            asked_before=before[change.field].flag if change.field in before else None,
            asked_after=after[change.field].flag if change.field in after else None,
        )
        for change in changes
    ]


def _compare(
    deployment: Deployment, resolver: Resolves, parser: ParserInfo, reference: ResolvedVariant, c: ResolvedVariant
) -> VariantComparison:
    assert reference.resolution is not None and c.resolution is not None and c.launch is not None
    mine, theirs = c.resolution, reference.resolution
    assert mine.effective is not None and theirs.effective is not None
    changes = field_changes(config_and_model(theirs), config_and_model(mine), theirs.writes, mine.writes)
    added = [a for a in differing_flags(theirs.argv, mine.argv, parser) if a.flag not in PREFLIGHT_FLAGS]
    jobs = [(ParsedArgv(mine.argv, parser).without(a.flag), c.launch.env) for a in added]
    effects = []
    for asked, without in zip(added, resolver.resolve(jobs, salt=config_digest(deployment)), strict=True):
        flag = asked.spelled
        dest = parser.options[asked.flag].dest
        if without.effective is None:
            error = f"{without.error.type}: {without.error.message}" if without.error else "no effective config"
            effects.append(FlagEffect(flag, dest, (), error))
            continue
        effects.append(
            FlagEffect(
                flag,
                dest,
                tuple(field_changes(config_and_model(without), config_and_model(mine), without.writes, mine.writes)),
            )
        )
    return VariantComparison(reference.variant.id, tuple(_asked_by(changes, reference, c, parser)), tuple(effects))


def explain(
    deployment: Deployment, resolver: Resolves, variant_ids: list[str], against: str | None = None
) -> list[Explanation]:
    """Each selected variant's decisions on the resolver's release; with ``against``, each compared with that
    variant of the same deployment."""
    known = [v.id for v in deployment.variants]
    selected = [*variant_ids, *([against] if against else [])]
    for wanted in selected:
        if wanted not in known:
            raise DeploymentError(f"{deployment.path}: no variant {wanted!r}; its variants: {', '.join(known)}")
    parser = resolver.release().parser
    checks = {c.variant.id: c for c in resolve_variants(deployment, resolver, selected, without_requests=False)}
    reference = checks.get(against) if against else None
    found = []
    for variant_id in variant_ids:
        c = checks[variant_id]
        failure = _failure(c)
        argv = c.resolution.argv if c.resolution else ()
        if failure is not None or c.resolution is None:
            found.append(Explanation(deployment.key, variant_id, parser.version, argv, (), failure))
            continue
        comparison = None
        if reference is not None and reference is not c:
            reference_failure = _failure(reference)
            if reference_failure is not None:
                raise PreflightError(f"{deployment.key}: cannot compare with {against}: {reference_failure}")
            comparison = _compare(deployment, resolver, parser, reference, c)
        scope = ModelScope.of(deployment.hf_config(), c.resolution.effective or {})
        decided = decisions(c.resolution, parser)
        # A setting that cannot act here is left out, unless SGLang turned something off through it.
        kept = tuple(d for d in decided if d.turns_off or scope.applies(d.field))
        left_out = {d.field for d in decided if d not in kept}
        if comparison is not None:
            left_out |= {ch.field for ch in comparison.changes if not scope.applies(ch.field)}
            changes = tuple(ch for ch in comparison.changes if scope.applies(ch.field))
            comparison = dataclasses.replace(comparison, changes=changes)
        found.append(
            Explanation(
                deployment.key, variant_id, parser.version, argv, kept, None, comparison, tuple(sorted(left_out))
            )
        )
    return found
