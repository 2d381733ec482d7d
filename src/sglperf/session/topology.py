"""A [topology]'s servers as one: every role's instances, SGLang's router in front, launched locally or as Slurm
job steps, and the check that every instance of a role runs the same effective config.

A role variant ("plain.replica") stands for its role: its live evidence is its first instance's, once every
instance of the role was read at its own ``/server_info`` and found to resolve the same config (a field that
differs fails the start, naming the field and both workers). The workloads go through the router; caches are
flushed and acceptance read at each worker (`sglperf.measure.meter`).

Slurm does not end the other steps of a job when one dies, nor when its srun client is killed: the allocation
is watched (`sglperf.runtime.slurm.StepWatch`) and cancelled whole, and so is it at every stop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sglperf.model.deployment import Deployment, Variant
from sglperf.model.process_exit import describe_exit
from sglperf.model.progress import Progress
from sglperf.model.server_facts import ServerFacts
from sglperf.model.topology import Role, Topology, role_variant_id
from sglperf.runtime import router as sglang_router
from sglperf.runtime import server, server_info, server_ledger
from sglperf.runtime.attach import AttachedServer
from sglperf.runtime.slurm import SlurmAllocation, SlurmError, StepWatch, slurm_problem, step_daemons
from sglperf.sglang.argv import ParsedArgv
from sglperf.sglang.flags import BOOTSTRAP_PORT_FLAG
from sglperf.sglang.server_api import RANK_SPECIFIC_FIELDS


@dataclass(frozen=True)
class TopologyWorker:
    """One instance of a role, as it answered at its own address."""

    role: str
    name: str
    server: server.Server | AttachedServer
    facts: ServerFacts
    bootstrap_port: int | None = None  # a prefill server's, as launched (the router hands it to the decode side)


class RoutedServers:
    """The router and every worker behind it: to the meter, one server at the router's address; to the live
    evidence, the ``stand_in`` worker of the role being judged (its log, its facts)."""

    def __init__(
        self,
        router: server.Server | AttachedServer,
        workers: tuple[TopologyWorker, ...],
        stand_in: TopologyWorker,
        allocation: SlurmAllocation | None = None,
        watch: StepWatch | None = None,
    ) -> None:
        self.router, self.workers, self.stand_in = router, workers, stand_in
        self.allocation, self.watch = allocation, watch
        self.spec = stand_in.server.spec
        self.command = stand_in.server.command

    @property
    def base_url(self) -> str:
        return self.router.base_url

    @property
    def headers(self) -> dict[str, str]:
        return self.stand_in.server.headers

    @property
    def attached(self) -> bool:
        return isinstance(self.router, AttachedServer)

    @property
    def worker_urls(self) -> tuple[str, ...]:
        return tuple(w.server.base_url for w in self.workers)

    def for_role(self, role: str) -> RoutedServers:
        """The same servers, standing for ``role`` (its first instance)."""
        first = next(w for w in self.workers if w.role == role)
        return RoutedServers(self.router, self.workers, first, self.allocation, self.watch)

    def log_tail(self, lines: int = 40) -> str:
        return self.stand_in.server.log_tail(lines)

    def local_roots(self) -> list[int]:
        """Processes on this machine that run our workers without being our children: the Slurm job's step
        daemons (a worker on another node is not this machine's load)."""
        return step_daemons(self.allocation.job_id) if self.allocation is not None else []

    def failure(self) -> str | None:
        """Why the servers are gone under the run (a Slurm step ended and the job was cancelled, or a local
        worker or the router exited); None: up."""
        if self.watch is not None and self.watch.failure:
            return self.watch.failure
        # A step's srun client exits when its step ends: the watch says so, once it has cancelled the job.
        workers = [] if self.watch is not None else [(w.name, w.server) for w in self.workers]
        for name, process in [*workers, ("the router", self.router)]:
            if isinstance(process, server.Server) and (code := process.proc.poll()) is not None:
                return (
                    f"{name} exited under the run ({describe_exit(code)}): the deployment is stopped; "
                    f"log {process.spec.log_path}"
                )
        return None

    def stop(self) -> server.StopReport:
        """The router, every worker, then the Slurm job (whatever is left of every step); idempotent."""
        if self.watch is not None:
            self.watch.stop()
        reports = [self.router.stop(), *(w.server.stop() for w in self.workers)]
        if self.allocation is not None:
            self.allocation.cancel_quietly("sglperf stopped the deployment")
        return server.StopReport(
            tuple(p for r in reports for p in r.pids),
            tuple(p for r in reports for p in r.killed),
            tuple(p for r in reports for p in r.survivors),
            sum(r.seconds for r in reports),
        )


def role_drift(workers: tuple[TopologyWorker, ...]) -> list[str]:
    """Every field in which an instance of a role resolved differently from the role's first, naming both
    workers: per-rank configs drift silently (a rank given other flags), and a role's measurements stand for
    all of its ranks only when they agree."""
    problems: list[str] = []
    first: dict[str, TopologyWorker] = {}
    for worker in workers:
        reference = first.setdefault(worker.role, worker)
        if reference is worker:
            continue
        ours, theirs = reference.facts.effective, worker.facts.effective
        for field in sorted((set(ours) | set(theirs)) - RANK_SPECIFIC_FIELDS):
            if ours.get(field) != theirs.get(field):
                problems.append(
                    f"role {worker.role!r}: {field} is {_short(theirs.get(field))} on worker {worker.name} "
                    f"({worker.server.base_url}) but {_short(ours.get(field))} on worker {reference.name} "
                    f"({reference.server.base_url})"
                )
    return problems


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class WorkerLaunch:
    """One instance to start: its role, its name and its server spec (argv without host and port)."""

    role: Role
    name: str
    spec: server.ServerSpec
    cuda_visible_devices: str | None = None  # a GPU runner's local launch: the GPUs leased for this instance


def worker_launches(
    deployment: Deployment,
    variant: Variant,
    spec_for: Callable[[Variant, str], server.ServerSpec],
) -> list[WorkerLaunch]:
    """Every instance of every role of ``variant``'s topology; ``spec_for(role_variant, name)`` spells one
    server (the live session's launch plan for that role's variant)."""
    topology = _topology(deployment)
    base = variant.base or variant.id
    launches = []
    for role in topology.roles:
        role_variant = deployment.variant(role_variant_id(base, role.name))
        for index in range(role.instances):
            name = f"{deployment.key}-{base}-{role.name}-{index}"
            spec = spec_for(role_variant, name)
            if role.kind == "prefill":
                spec = replace(spec, argv=(*spec.argv, BOOTSTRAP_PORT_FLAG, str(server.free_port())))
            launches.append(WorkerLaunch(role, name, spec))
    return launches


def start_topology(
    deployment: Deployment,
    variant: Variant,
    launches: list[WorkerLaunch],
    router_log: Callable[[str], Any],
    progress: Progress,
) -> RoutedServers:
    """Start every worker (all at once, then wait for each), the router in front, and check the roles agree;
    anything that fails stops what was started and raises ServerStartError with one line."""
    topology = _topology(deployment)
    base = variant.base or variant.id
    allocation = _allocation(deployment, base, launches, progress)
    started: list[tuple[WorkerLaunch, server.Server]] = []
    workers: list[TopologyWorker] = []
    watch: StepWatch | None = None
    router: server.Server | None = None
    try:
        server_ledger.sweep(progress)
        for launch in launches:
            spec = launch.spec
            if allocation is not None:
                spec = replace(spec, prefix=allocation.step_prefix(launch.name))
            worker = server.Server(spec, launch.cuda_visible_devices)
            progress(f"{launch.name}: starting {' '.join(worker.command)} (log {spec.log_path})")
            started.append((launch, worker))
        if allocation is not None:
            clients: Mapping[str, Callable[[], int | None]] = {launch.name: w.proc.poll for launch, w in started}
            watch = StepWatch(allocation, clients, progress=progress)
        for launch, worker in started:
            seconds = worker.wait_healthy(progress)
            progress(f"{launch.name}: healthy after {seconds:.1f} s at {worker.base_url}")
            bootstrap = ParsedArgv(launch.spec.argv).find(BOOTSTRAP_PORT_FLAG)
            port = int(bootstrap.value) if bootstrap is not None and bootstrap.value else None
            workers.append(TopologyWorker(launch.role.name, launch.name, worker, _facts(worker), port))
        if drift := role_drift(tuple(workers)):
            raise server.ServerStartError(f"{deployment.key}-{base}: ranks of one role differ: {drift[0]}")
        plan = router_plan(topology, workers)
        name = f"{deployment.key}-{base}-router"
        spec = sglang_router.router_spec(plan, name, router_log(name), deployment.launch.startup_timeout_s)
        router = sglang_router.start_router(plan, spec, progress)
    except BaseException as exc:
        if watch is not None:
            watch.stop()
        for _, worker in started:
            worker.stop()
        if allocation is not None:
            allocation.cancel_quietly("sglperf: the deployment did not start")
        if watch is not None and watch.failure and isinstance(exc, server.ServerStartError):
            raise server.ServerStartError(watch.failure) from None
        raise
    entry = topology.entry_role.name
    stand_in = next(w for w in workers if w.role == entry)
    shape = topology.describe(deployment.launch.tp_size)
    progress(f"{deployment.key}-{base}: {shape} behind the router at {router.base_url}")
    return RoutedServers(router, tuple(workers), stand_in, allocation, watch)


def router_plan(topology: Topology, workers: list[TopologyWorker]) -> sglang_router.RouterPlan:
    kinds = {r.name: r.kind for r in topology.roles}
    regular = tuple(w.server.base_url for w in workers if kinds[w.role] == "replica")
    prefill = tuple((w.server.base_url, w.bootstrap_port or 0) for w in workers if kinds[w.role] == "prefill")
    decode = tuple(w.server.base_url for w in workers if kinds[w.role] == "decode")
    return sglang_router.RouterPlan(regular, prefill, decode, topology.router_policy)


def attach_topology(
    deployment: Deployment, url: str, api_key: str | None, read: Callable[[str], ServerFacts]
) -> RoutedServers:
    """A deployment someone else launched: the router at ``url``, its workers as the router lists them, each
    read at its own address (``read``) and matched to the topology's roles by kind."""
    topology = _topology(deployment)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    listed = sglang_router.router_workers(url, headers)
    roles: dict[str, str] = {r.kind: r.name for r in topology.roles}
    workers = []
    for i, found in enumerate(listed):
        role_name = roles.get(found.role_kind)
        if not found.healthy:
            raise server.ServerStartError(
                f"--sglang-url {url}: the router counts worker {found.url} unhealthy: a measurement through it "
                "would go round that worker; bring it back or check the deployment as it is without it"
            )
        if role_name is None:
            raise server.ServerStartError(
                f"--sglang-url {url}: the router fronts a {found.role_kind} worker ({found.url}), which "
                f"{deployment.path.name}'s [topology] has no role for"
            )
        name = f"{role_name}-{i}"
        workers.append(TopologyWorker(role_name, name, AttachedServer(found.url, api_key, name), read(found.url)))
    for role in topology.roles:
        count = sum(w.role == role.name for w in workers)
        if count != role.instances:
            raise server.ServerStartError(
                f"--sglang-url {url}: the router fronts {count} {role.kind} worker(s), [topology] role "
                f"{role.name!r} has instances = {role.instances}"
            )
    if drift := role_drift(tuple(workers)):
        raise server.ServerStartError(f"--sglang-url {url}: ranks of one role differ: {drift[0]}")
    stand_in = next(w for w in workers if w.role == topology.entry_role.name)
    return RoutedServers(AttachedServer(url, api_key, f"router@{url}"), tuple(workers), stand_in)


def _facts(worker: server.Server) -> ServerFacts:
    try:
        return server_info.read_facts(worker.base_url, worker.headers)
    except server_info.LiveError as exc:
        raise server.ServerStartError(f"{worker.spec.name}: {exc}") from None


def _allocation(
    deployment: Deployment, base: str, launches: list[WorkerLaunch], progress: Progress
) -> SlurmAllocation | None:
    """The Slurm job the workers run in, when the runner launches with Slurm: one task per instance."""
    if deployment.runner.launcher != "slurm":
        return None
    if problem := slurm_problem():
        raise server.ServerStartError(f"runner {deployment.runner.name!r} launches with Slurm, but {problem}")
    # One CPU per server process: a CPU runner's server binds one OpenMP thread (the deployment's env), and the
    # GPUs of a GPU runner's steps are not asked of Slurm yet (--gpus-per-task: docs/scale-out.md).
    try:
        return SlurmAllocation.allocate(
            f"sglperf-{deployment.key}-{base}", len(launches), 1, deployment.launch.startup_timeout_s, progress
        )
    except SlurmError as exc:
        raise server.ServerStartError(str(exc)) from None


def _topology(deployment: Deployment) -> Topology:
    if deployment.topology is None:
        raise ValueError(f"{deployment.path}: no [topology]")
    return deployment.topology
