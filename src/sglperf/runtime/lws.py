"""A topology as Kubernetes manifests, for review before someone applies them: one LeaderWorkerSet per role.

sglperf does not apply them (no cluster here, and a cluster's storage, images and quotas are its operator's):
it renders what it would launch, with the argv the release accepts for each role, so the manifests and the
suite's checks cannot drift apart. A LeaderWorkerSet group is one instance: its leader is node rank 0 and serves
HTTP, its workers are ranks 1.. (``LWS_WORKER_INDEX``), all meeting at the leader (``LWS_LEADER_ADDRESS``). The
router finds the leaders by their labels (``--service-discovery``), so it needs to watch pods: a ServiceAccount
with that right comes with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sglperf.model.topology import Role
from sglperf.runtime.router import PD_FLAG, POLICY_FLAG, READINESS_PATH, ROUTER_MODULE
from sglperf.sglang.flags import BOOTSTRAP_PORT_FLAG, HOST_FLAG, PORT_FLAG, rank_flags
from sglperf.sglang.server_api import HEALTH_PATHS, LAUNCH_MODULE

LWS_API = "leaderworkerset.x-k8s.io/v1"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # "0" on a group's leader
ROLE_LABEL, DEPLOYMENT_LABEL = "sglperf.io/role", "sglperf.io/deployment"
SERVER_PORT, RENDEZVOUS_PORT, BOOTSTRAP_PORT = 30000, 20000, 8998
# The router's Kubernetes discovery (sglang-router 0.3.x).
DISCOVERY = ("--service-discovery", "--service-discovery-port", str(SERVER_PORT))
SELECTOR_FLAGS = {"replica": "--selector", "prefill": "--prefill-selector", "decode": "--decode-selector"}
# Where the router's discovery reads a prefill pod's bootstrap port (a string in sglang-router 0.3.2's binary).
BOOTSTRAP_ANNOTATION = "sglang.ai/bootstrap-port"


@dataclass(frozen=True)
class RoleLaunch:
    """One role as it would be launched: its shape and the argv the release accepts for it."""

    role: Role
    argv: tuple[str, ...]  # without host, port and the launcher's per-rank flags
    env: Mapping[str, str] = field(default_factory=dict)
    gpus_per_node: int = 0


def manifests(
    name: str, launches: Sequence[RoleLaunch], image: str, namespace: str, policy: str = "round_robin"
) -> list[dict[str, Any]]:
    """Every object: one LeaderWorkerSet per role, then the router (its account, role, binding, Deployment and
    Service). ``name``: the topology's name in labels and object names (e.g. "qwen36-mtp3")."""
    objects = [_leader_worker_set(name, launch, image, namespace) for launch in launches]
    return objects + _router(name, launches, image, namespace, policy)


def _leader_worker_set(name: str, launch: RoleLaunch, image: str, namespace: str) -> dict[str, Any]:
    role = launch.role
    labels = {DEPLOYMENT_LABEL: name, ROLE_LABEL: role.name}
    pod: dict[str, Any] = {"labels": labels}
    if role.kind == "prefill":
        pod["annotations"] = {BOOTSTRAP_ANNOTATION: str(BOOTSTRAP_PORT)}
    # LeaderWorkerSet requires a worker template; a group of one never creates a worker from it.
    rank = "$(LWS_WORKER_INDEX)" if role.nodes > 1 else "0"
    group: dict[str, Any] = {
        "size": role.nodes,
        "restartPolicy": "RecreateGroupOnPodRestart",  # a rank lost is a group lost: its collectives hang
        "leaderTemplate": {"metadata": pod, "spec": {"containers": [_container(launch, image, "0")]}},
        "workerTemplate": {"metadata": pod, "spec": {"containers": [_container(launch, image, rank)]}},
    }
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": f"{name}-{role.name}", "namespace": namespace, "labels": labels},
        "spec": {"replicas": role.instances, "leaderWorkerTemplate": group},
    }


def _container(launch: RoleLaunch, image: str, rank: str) -> dict[str, Any]:
    role = launch.role
    argv = [*launch.argv, HOST_FLAG, "0.0.0.0", PORT_FLAG, str(SERVER_PORT)]
    if role.nodes > 1:
        argv += rank_flags(role.nodes, rank, f"$(LWS_LEADER_ADDRESS):{RENDEZVOUS_PORT}")
    if role.kind == "prefill":
        argv += [BOOTSTRAP_PORT_FLAG, str(BOOTSTRAP_PORT)]
    container: dict[str, Any] = {
        "name": "sglang",
        "image": image,
        "command": ["python3", "-m", LAUNCH_MODULE, *argv],
        "env": [{"name": k, "value": v} for k, v in sorted(launch.env.items())],
        "ports": [{"containerPort": SERVER_PORT, "name": "http"}],
    }
    if launch.gpus_per_node:
        container["resources"] = {"limits": {"nvidia.com/gpu": launch.gpus_per_node}}
    if rank == "0":
        # /health, not /health_generate: a probe every 10 s should not generate a token each time.
        probe = {"path": HEALTH_PATHS[-1], "port": SERVER_PORT}
        container["readinessProbe"] = {"httpGet": probe, "periodSeconds": 10}
    return container


def _router(name: str, launches: Sequence[RoleLaunch], image: str, namespace: str, policy: str) -> list[dict[str, Any]]:
    account = f"{name}-router"
    argv = [HOST_FLAG, "0.0.0.0", PORT_FLAG, str(SERVER_PORT), POLICY_FLAG, policy, *DISCOVERY]
    argv += ["--service-discovery-namespace", namespace]
    kinds = {launch.role.kind for launch in launches}
    if kinds & {"prefill", "decode"}:
        argv.append(PD_FLAG)
    for launch in launches:
        selector = [f"{DEPLOYMENT_LABEL}={name}", f"{ROLE_LABEL}={launch.role.name}", f"{WORKER_INDEX_LABEL}=0"]
        argv += [SELECTOR_FLAGS[launch.role.kind], *selector]
    labels = {DEPLOYMENT_LABEL: name, ROLE_LABEL: "router"}
    meta = {"namespace": namespace, "labels": labels}
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    container = {
        "name": "router",
        "image": image,
        "command": ["python3", "-m", ROUTER_MODULE, *argv],
        "ports": [{"containerPort": SERVER_PORT, "name": "http"}],
        "readinessProbe": {"httpGet": {"path": READINESS_PATH, "port": SERVER_PORT}, "periodSeconds": 10},
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, **meta}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": account, **meta},
            "rules": [rule],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": account, **meta},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": account, **meta},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"serviceAccountName": account, "containers": [container]},
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": account, **meta},
            "spec": {"selector": labels, "ports": [{"port": SERVER_PORT, "targetPort": SERVER_PORT, "name": "http"}]},
        },
    ]
