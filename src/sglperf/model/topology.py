"""A deployment bigger than one server (``[topology]``): roles, their instances and nodes, behind SGLang's router.

Each role is a group of identical SGLang servers: data-parallel replicas, or the prefill and decode servers
of a disaggregated deployment. Every instance of a role is launched with the same flags, so every rank of it
must resolve the same effective config; SGLang's rules differ by role (a prefill server's graphs are not a
decode server's), so each role is resolved and judged as a variant of its own (`Deployment.variants` holds
one per variant and role, named ``VARIANT.ROLE``). The router is the one entry the workloads are measured
through; the decode graph's captured batch is per worker, so the workload's batch is divided by the workers
that serve it (`Topology.decode_workers`).

What fits where is checked here, against the runner pool (`RunnerProfile.nodes` machines of ``gpu_count``
GPUs), before anything is launched.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sglperf.model.deployment_fields import Flags, Slug, StrictTable, did_you_mean
from sglperf.model.intent_names import INTENT_NAMES, SPECULATIVE
from sglperf.model.runner_profile import RunnerProfile

RoleKind = Literal["replica", "prefill", "decode"]
RouterPolicy = Literal["round_robin", "random", "cache_aware", "power_of_two"]
# Between a variant's id and its role's name in the role variant's id: "plain.prefill".
ROLE_SEPARATOR = "."


class Role(StrictTable):
    """One group of identical servers."""

    name: Slug
    kind: RoleKind = "replica"
    instances: int = Field(default=1, ge=1, le=256)
    nodes: int = Field(default=1, ge=1, le=64, description="machines per instance (multi-node tensor parallel)")
    tp_size: int | None = Field(default=None, ge=1, description="default: launch.tp_size")
    dp_size: int = Field(default=1, ge=1)
    flags: Flags = Field(default_factory=list, description="this role's own SGLang flags, after the variant's")
    expect: dict[str, bool] = Field(default_factory=dict, description="intents this role's servers are held to")

    @field_validator("expect")
    @classmethod
    def _intents_known(cls, value: dict[str, bool]) -> dict[str, bool]:
        for name in value:
            if name not in INTENT_NAMES or name == SPECULATIVE:
                known = sorted(n for n in INTENT_NAMES if n != SPECULATIVE)
                raise ValueError(f"unknown intent {name!r}; allowed: {', '.join(known)}{did_you_mean(name, known)}")
        return value

    def gpus_per_instance(self, launch_tp: int) -> int:
        return (self.tp_size or launch_tp) * self.dp_size

    def workers(self) -> int:
        """Schedulers that each run their own decode batch: instances times data-parallel ranks."""
        return self.instances * self.dp_size


class Topology(StrictTable):
    roles: list[Role] = Field(min_length=1)
    router_policy: RouterPolicy = "round_robin"

    @model_validator(mode="after")
    def _roles_make_a_deployment(self) -> Topology:
        names = [r.name for r in self.roles]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"roles[{i}].name: duplicate role {name!r}")
        kinds = {r.kind for r in self.roles}
        if "replica" in kinds and kinds != {"replica"}:
            raise ValueError("roles: replicas and prefill/decode roles do not mix; use one or the other")
        if kinds & {"prefill", "decode"} and kinds != {"prefill", "decode"}:
            missing = ({"prefill", "decode"} - kinds).pop()
            raise ValueError(f"roles: a disaggregated deployment needs a {missing} role (kind = {missing!r})")
        if kinds == {"replica"} and len(self.roles) > 1:
            raise ValueError("roles: one replica role (its instances are the replicas), not several")
        return self

    def role(self, name: str) -> Role:
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(name)

    @property
    def entry_role(self) -> Role:
        """The role whose variant carries the deployment's measurements (taken through the router): the replicas,
        or the decode role, which streams the tokens."""
        return next(r for r in self.roles if r.kind in ("replica", "decode"))

    def decode_workers(self, role: Role) -> int:
        """How many schedulers share the workload's decode batch on a server of ``role``: its own workers for
        a replica or decode role; a prefill server runs no decode batch (1: the batch as sent)."""
        return role.workers() if role.kind in ("replica", "decode") else 1

    def describe(self, launch_tp: int) -> str:
        """One line, e.g. "2 x replica (tp 1)" or "1 x prefill (tp 2) + 2 x decode (tp 1, dp 2)"."""
        parts = []
        for role in self.roles:
            shape = f"tp {role.tp_size or launch_tp}"
            shape += f", dp {role.dp_size}" if role.dp_size > 1 else ""
            shape += f", {role.nodes} nodes" if role.nodes > 1 else ""
            parts.append(f"{role.instances} x {role.name} ({shape})")
        return " + ".join(parts)

    def fit_problems(self, runner: RunnerProfile, launch_tp: int) -> list[str]:
        """Why the roles do not fit the runner pool, each naming the role: nodes x GPUs per role against
        ``runner.nodes`` machines of ``runner.gpu_count`` GPUs, and parallelism that divides across nodes."""
        problems: list[str] = []
        pool = runner.nodes or 1
        if runner.is_cpu:
            for role in self.roles:
                if (role.tp_size or launch_tp) != 1 or role.dp_size != 1 or role.nodes != 1:
                    problems.append(
                        f"roles.{role.name}: a CPU runner serves one process per instance (tp 1, dp 1, 1 node)"
                    )
            return problems
        per_node_demands: list[int] = []
        whole_nodes = 0
        for role in self.roles:
            gpus = role.gpus_per_instance(launch_tp)
            if role.nodes > 1:
                if gpus % role.nodes:
                    problems.append(
                        f"roles.{role.name}: tp_size x dp_size = {gpus} GPUs do not divide over {role.nodes} nodes"
                    )
                    continue
                per_node = gpus // role.nodes
                if per_node > runner.gpu_count:
                    problems.append(
                        f"roles.{role.name}: {per_node} GPUs per node, but runner {runner.name!r} has "
                        f"{runner.gpu_count} per node"
                    )
                    continue
                whole_nodes += role.instances * role.nodes
            elif gpus > runner.gpu_count:
                problems.append(
                    f"roles.{role.name}: an instance needs {gpus} GPUs (tp_size x dp_size) but a node of runner "
                    f"{runner.name!r} has {runner.gpu_count}; set nodes to spread it"
                )
            else:
                per_node_demands += [gpus] * role.instances
        if problems:
            return problems
        needed = whole_nodes + _nodes_for(per_node_demands, runner.gpu_count)
        if needed > pool:
            problems.append(
                f"topology: needs {needed} nodes of {runner.gpu_count} GPUs, runner {runner.name!r} has {pool} "
                "(runner.nodes)"
            )
        return problems


def _nodes_for(demands: list[int], per_node: int) -> int:
    """Nodes that hold single-node instances of these GPU counts: first-fit decreasing (an instance never
    spans nodes)."""
    free: list[int] = []
    for need in sorted(demands, reverse=True):
        for i, left in enumerate(free):
            if left >= need:
                free[i] -= need
                break
        else:
            free.append(per_node - need)
    return len(free) if demands else 0


def role_variant_id(variant: str, role: str) -> str:
    return f"{variant}{ROLE_SEPARATOR}{role}"


def batch_per_worker(batch: int, workers: int) -> int:
    """The decode batch one of ``workers`` schedulers runs when a balanced router spreads ``batch`` requests."""
    return math.ceil(batch / workers)
