"""A deployment's variants resolved by one release: each variant's argv spelled for it and resolved by SGLang's
own code, with nothing judged. `check` judges the result; `explain` reads it as it is.

What a resolver is (`Resolves`): the real one runs SGLang in a worker (`resolver.Resolver`); the stand-in
(`sglperf.testing.standin_resolver`) answers from rules a test writes, so that check and explain run in the
fast tier.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from sglperf.model.deployment import Deployment, Variant
from sglperf.model.resolution import Resolution
from sglperf.sglang.argv import Release
from sglperf.sglang.flags import SKIP_TOKENIZER_FLAG, FlagError, LaunchPlan, launch_plan, rank_flags

PREFLIGHT_FLAGS = (SKIP_TOKENIZER_FLAG,)  # preflight has config.json only, no tokenizer files


class Resolves(Protocol):
    """What check and explain need of a resolver: the release it asks, and its answer for each argv."""

    def release(self) -> Release: ...

    def resolve(self, jobs: Sequence[tuple[Sequence[str], dict[str, str]]], salt: str = "") -> list[Resolution]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ResolvedVariant:
    """One variant as one release resolves it (or why its flags could not be spelled for that release)."""

    deployment: Deployment
    variant: Variant
    launch: LaunchPlan | None
    resolution: Resolution | None
    plan_error: str | None = None
    # The variant resolved without each of its boolean requests: where SGLang then decides otherwise, the
    # request overrides one of SGLang's own rules (check quotes the rule as a caveat).
    unasked: Mapping[str, Resolution] = field(default_factory=dict)
    # A multi-node role's ranks 1.. as the release resolves them (``resolution`` is rank 0's): each must decide
    # what rank 0 decides.
    ranks: tuple[Resolution, ...] = ()


def config_digest(deployment: Deployment) -> str:
    """What the argv does not show of the model: its config.json (a resolution's cache salt)."""
    return hashlib.sha256(deployment.config_path.read_bytes()).hexdigest()


def _without_each_request(variant: Variant, plan: Callable[[Variant], LaunchPlan]) -> list[tuple[str, LaunchPlan]]:
    """The variant planned once without each of its boolean requests (those the release can spell)."""
    found = []
    for name, value in variant.request.items():
        if not isinstance(value, bool):
            continue
        without = variant.model_copy(update={"request": {k: v for k, v in variant.request.items() if k != name}})
        try:
            found.append((name, plan(without)))
        except FlagError:
            continue
    return found


def resolve_variants(
    deployment: Deployment,
    resolver: Resolves,
    variant_ids: Sequence[str] | None = None,
    *,
    without_requests: bool = True,
) -> list[ResolvedVariant]:
    """Plan and resolve every (selected) variant in one batch; ``without_requests``: each boolean request
    left out too (what check needs for its caveats, explain does not)."""
    parser = resolver.release().parser
    architectures = deployment.architectures
    model_dir = str(deployment.config_path.parent)

    def plan(variant: Variant) -> LaunchPlan:
        launch = launch_plan(deployment, variant, parser, model_dir, architectures, on_runner=False)
        return replace(launch, argv=(*launch.argv, *_rank(deployment, variant, 0)))

    planned: list[tuple[Variant, LaunchPlan | None, str | None]] = []
    for variant in deployment.variants:
        if variant_ids is not None and variant.id not in variant_ids:
            continue
        try:
            planned.append((variant, plan(variant), None))
        except FlagError as exc:
            planned.append((variant, None, str(exc)))
    unasked = [
        (variant.id, name, without)
        for variant, launch, _ in planned
        if launch is not None and without_requests
        for name, without in _without_each_request(variant, plan)
    ]
    # Ranks 1.. of a multi-node role: rank 0's argv with its own rank.
    rank_jobs = [
        (variant.id, replace(launch, argv=(*launch.argv[: len(launch.argv) - len(flags)], *flags)))
        for variant, launch, _ in planned
        if launch is not None
        for flags in (_rank(deployment, variant, r) for r in range(1, _nodes(deployment, variant)))
    ]
    launches = [launch for _, launch, _ in planned if launch is not None] + [p for _, _, p in unasked]
    launches += [p for _, p in rank_jobs]
    answers = iter(
        resolver.resolve([((*p.argv, *PREFLIGHT_FLAGS), p.env) for p in launches], salt=config_digest(deployment))
    )
    resolved = {variant.id: next(answers) for variant, launch, _ in planned if launch is not None}
    without_each: dict[str, dict[str, Resolution]] = {}
    for variant_id, name, _ in unasked:
        without_each.setdefault(variant_id, {})[name] = next(answers)
    ranks: dict[str, list[Resolution]] = {}
    for variant_id, _ in rank_jobs:
        ranks.setdefault(variant_id, []).append(next(answers))
    return [
        ResolvedVariant(
            deployment,
            variant,
            launch,
            resolved.get(variant.id),
            error,
            without_each.get(variant.id, {}),
            tuple(ranks.get(variant.id, ())),
        )
        for variant, launch, error in planned
    ]


# Where a multi-node instance's ranks meet, as preflight spells it (the launcher picks the real address).
PREFLIGHT_RENDEZVOUS = "127.0.0.1:20000"


def _nodes(deployment: Deployment, variant: Variant) -> int:
    role = deployment.role_of(variant)
    return role.nodes if role else 1


def _rank(deployment: Deployment, variant: Variant, rank: int) -> list[str]:
    """The launcher's flags for one rank of the variant's role; none for a single-node instance."""
    nodes = _nodes(deployment, variant)
    return rank_flags(nodes, str(rank), PREFLIGHT_RENDEZVOUS) if nodes > 1 else []
