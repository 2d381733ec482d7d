"""`sglperf manifests`: a deployment's [topology] as Kubernetes LeaderWorkerSet manifests, for review (a dry run:
nothing is applied), each role spelled by the release's own parser as preflight and the live tier spell it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from sglperf.commands import UsageError
from sglperf.commands.resolve import resolver_for
from sglperf.model.deployment import Deployment
from sglperf.model.progress import Progress, silent
from sglperf.model.topology import role_variant_id
from sglperf.runtime.lws import RoleLaunch, manifests
from sglperf.sglang.flags import launch_plan


def render(
    found: Sequence[Deployment],
    python: str,
    variant: str | None,
    image: str,
    namespace: str,
    progress: Progress = silent,
) -> list[dict[str, Any]]:
    """Every object of each deployment's topology for one variant (default: each deployment's first)."""
    objects: list[dict[str, Any]] = []
    for deployment in found:
        topology = deployment.topology
        if topology is None:
            raise UsageError(f"{deployment.path}: no [topology]; manifests are rendered for a topology's roles")
        bases = list(dict.fromkeys(v.base or v.id for v in deployment.variants))
        base = variant or bases[0]
        if base not in bases:
            raise UsageError(f"--variant {base}: {deployment.path} has variants {', '.join(bases)}")
        resolver = resolver_for(deployment, python, progress)
        try:
            parser = resolver.release().parser
        finally:
            resolver.close()
        served = os.path.expandvars(deployment.model.served_path)
        launches = []
        for role in topology.roles:
            role_variant = deployment.variant(role_variant_id(base, role.name))
            plan = launch_plan(deployment, role_variant, parser, served, deployment.architectures)
            per_node = (
                0 if deployment.runner.is_cpu else role.gpus_per_instance(deployment.launch.tp_size) // role.nodes
            )
            launches.append(RoleLaunch(role, plan.argv, plan.env, per_node))
        name = f"{deployment.key}-{base}".replace(".", "-").replace("_", "-").lower()
        objects += manifests(name, launches, image, namespace, topology.router_policy)
    return objects
