"""The run's live state: one server per variant, one variant at a time, and its measurements.

The pytest plugin only maps items onto these objects, so the same run can be driven from code.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sglperf import preflight
from sglperf.judge import coverage, live_evidence
from sglperf.judge import divergence as args_divergence
from sglperf.model.checkpoint import CheckpointFacts, gpu_weights
from sglperf.model.deployment import Deployment, Variant
from sglperf.model.files import GIB, os_problem, read_input
from sglperf.model.graph_coverage import CapturedSizes
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.progress import Progress
from sglperf.model.resolution import Resolution
from sglperf.model.server_facts import ServerFacts
from sglperf.model.topology import Role
from sglperf.model.verdict import Verdict
from sglperf.model.workload import LoadPoint, Workload, measurement_key
from sglperf.results import folder as results_folder
from sglperf.runtime import gpus, server, server_info
from sglperf.runtime.attach import AttachedServer, AttachError, DeclaredGpus, attached_profile_problems, read_attached
from sglperf.runtime.router import RouterError, router_version
from sglperf.session import topology
from sglperf.session.capacity_search import CapacityReport, CapacitySearch
from sglperf.session.handles import ServerHandle, VariantRef
from sglperf.session.measurement import Measurement
from sglperf.session.preflight_session import PreflightSession, deployment_key
from sglperf.session.running import LiveOptions, LiveSkip, RunningVariant
from sglperf.sglang import batch_log, cpu_features, metrics_catalogue
from sglperf.sglang.argv import ParsedArgv
from sglperf.sglang.cpu_shim import AMX_NOTE
from sglperf.sglang.flags import LaunchPlan, launch_plan
from sglperf.sglang.intents import DECODE_GRAPH, PREFILL_GRAPH

MODEL_PATH_ENV = "SGLPERF_MODEL_PATH"
# The emulator's configuration keys this session sets (sglperf.testing.emulator.config.EmulatorConfig's
# fields: production code never imports the test double, a unit test checks the names).
EMULATOR_WEIGHT_KEY, EMULATOR_VISION_KEY = "weight_gb_per_gpu", "vision_weight_gb_per_gpu"
EMULATOR_GPU_MEMORY_KEY = "gpu_memory_gb"
# A drift asked for runs on one clock for every server of the run: the session's start.
EMULATOR_DRIFT_KEY, EMULATOR_DRIFT_EPOCH_KEY = "drift_per_min", "drift_epoch"
API_KEY_ENV = "SGLPERF_API_KEY"


class LiveSession:
    """Starts one server per (deployment, variant) on a GPU set of its own, one variant at a time."""

    def __init__(self, options: LiveOptions, preflight_session: PreflightSession, progress: Progress):
        self.options = options
        self.preflight = preflight_session
        self.progress = progress
        self.current: RunningVariant | None = None
        self._failures: dict[tuple[str, str], str] = {}
        self._allocator: gpus.GpuAllocator | None = None
        self.launches = 0  # servers this session started (attached ones are not)
        self._attached_to: tuple[str, str] | None = None
        # A [topology]'s servers, started once for all of a variant's roles: (deployment, variant) -> them.
        self._routed: topology.RoutedServers | None = None
        self._routed_key: tuple[str, str] | None = None
        self._planned_roles: dict[str, _PlannedServer] = {}
        self._topology_leases: list[gpus.Lease] = []
        self.capacity_search = CapacitySearch()
        self.measured: dict[str, MeasurementRecord] = {}  # by measurement key, this process's
        # The clock an emulator's drift runs on: the run's (every xdist worker's alike), else this session's.
        run = options.run
        self.started = datetime.datetime.fromisoformat(run.started_at).timestamp() if run else time.time()

    def _inventory(self, deployment: Deployment) -> gpus.Inventory:
        if self.options.emulator and not os.environ.get(gpus.SIMULATED_ENV):
            # The emulator stands in for the runner: give it the runner's GPUs so allocation and
            # profile checks run exactly as on the GPU box.
            runner = deployment.runner
            os.environ[gpus.SIMULATED_ENV] = f"{runner.gpu_count}x{runner.gpu_name}:{runner.memory_gib}"
        return gpus.visible_gpus()

    def skip_reason(self, deployment: Deployment) -> str | None:
        if self.options.attach_url:
            return None  # the attached server's identity is checked when it is first asked for
        if deployment.runner.is_cpu:
            # A real SGLang server on this CPU: no GPU to find or lock, but a CPU its kernel runs on.
            if self.options.emulator:
                return None
            problem = cpu_features.runner_cpu_problem(deployment.runner.kernel)
            if problem:
                return f"{problem} (CPU runner {deployment.runner.name!r})"
            unset = self._unset_model_path(deployment)
            if unset:
                return f"{unset}; ci/cpu-tier.sh writes the tiny models and sets it"
            return None
        inventory = self._inventory(deployment)
        if not inventory.gpus:
            return (
                "no GPU visible (NVML and nvidia-smi found none): run the live tier on a GPU runner, "
                "or pass --emulator to exercise it against the SGLang emulator (a test double)"
            )
        mismatches = gpus.match_profile(inventory, deployment.runner, deployment.launch.tp_size)
        if mismatches and not self.options.ignore_runner_mismatch:
            return (
                f"this machine is not runner profile {deployment.runner.name!r}: {'; '.join(mismatches)} "
                "(pass --ignore-runner-mismatch to run anyway)"
            )
        return None

    def forget_failure(self, deployment: Deployment, variant: Variant) -> None:
        """Let the next `running` start this variant again, where a failed start is remembered for the run."""
        self._failures.pop((deployment_key(deployment), variant.id), None)

    def running(self, deployment: Deployment, variant: Variant) -> RunningVariant:
        key = (deployment_key(deployment), variant.id)
        if key in self._failures:
            raise server.ServerStartError(self._failures[key])
        # A topology's servers may be gone under the run (a Slurm step ended): asked again each time.
        if self.options.attach_url and deployment.topology is not None:
            return self._attach_topology(deployment, variant)
        if deployment.topology is not None:
            return self._running_topology(deployment, variant)
        if self.current is not None and self.current.key == key:
            return self.current
        if self.options.attach_url:
            self.current = self._attach(deployment, variant)
            return self.current
        self.stop()
        reason = self.skip_reason(deployment)
        if reason:
            raise LiveSkip(reason)
        try:
            self.current = self._start(deployment, variant)
            self.launches += 1
        except (server.ServerStartError, server_info.LiveError, TimeoutError) as exc:
            self._failures[key] = str(exc)
            raise server.ServerStartError(str(exc)) from None
        return self.current

    def _running_topology(self, deployment: Deployment, variant: Variant) -> RunningVariant:
        """A role variant's view of its topology, started once for all roles of the same variant."""
        whole = (deployment_key(deployment), variant.base or variant.id)
        key = (whole[0], variant.id)
        if whole in self._failures:
            raise server.ServerStartError(self._failures[whole])
        if self._routed is None or self._routed_key != whole:
            self.stop()
            reason = self.skip_reason(deployment)
            if reason:
                raise LiveSkip(reason)
            try:
                self._routed = self._start_topology(deployment, variant)
            except (server.ServerStartError, server_info.LiveError, TimeoutError) as exc:
                self._failures[whole] = str(exc)
                raise server.ServerStartError(str(exc)) from None
            self._routed_key = whole
            self.launches += 1
        if gone := self._routed.failure():
            self._failures[whole] = gone
            self.stop()
            raise server.ServerStartError(gone)
        if self.current is None or self.current.key != key:
            self.current = self._role_view(deployment, variant, self._routed)
        return self.current

    def _model_path(self, deployment: Deployment) -> str:
        chosen = self.options.model_path or os.environ.get(MODEL_PATH_ENV)
        if chosen:
            return chosen
        # The emulator has no checkpoint: it serves the config preflight uses (for /model_info).
        if self.options.emulator:
            return str(deployment.config_path.parent)
        unset = self._unset_model_path(deployment)
        if unset:
            raise server.ServerStartError(unset)
        return os.path.expanduser(os.path.expandvars(deployment.model.served_path))

    def _unset_model_path(self, deployment: Deployment) -> str | None:
        """served_path may name environment variables, e.g. "${SGLPERF_TINY_MODELS}/tiny-qwen3"; what is
        wrong when one is not set (and no --model-path / SGLPERF_MODEL_PATH overrides it)."""
        if self.options.model_path or os.environ.get(MODEL_PATH_ENV):
            return None
        served = os.path.expandvars(deployment.model.served_path)
        if "$" not in served:
            return None
        return (
            f"{deployment.path.name}: model.served_path {deployment.model.served_path!r} names an environment "
            f"variable that is not set; set it or pass --model-path"
        )

    def _planned(self, deployment: Deployment, variant: Variant, name: str) -> _PlannedServer:
        """One server of ``variant`` spelled for the release preflight resolved with: its argv (with the batch
        log interval and metrics sglperf reads), its environment (the emulator's, under --emulator)."""
        check = self.preflight.check(deployment, variant.id)
        release = self.preflight.resolver(deployment).release()
        launch = launch_plan(
            deployment, variant, release.parser, self._model_path(deployment), deployment.architectures
        )
        launch, interval = _with_decode_log_interval(launch, deployment, variant, release.parser.has)
        launch, metrics_off = _with_server_metrics(launch, deployment, release.parser.has)
        env = dict(launch.env)
        if self.options.emulator:
            env.update(self._emulator_env(name, check, release.version, deployment, deployment.hf_config()))
        # The emulator is part of sglperf, so it runs under sglperf's interpreter, not SGLang's.
        python = sys.executable if self.options.emulator else release.python
        spec = server.ServerSpec(
            name=name,
            python=python,
            argv=launch.argv,
            env=env,
            log_path=results_folder.server_log_path(self.options.results_dir, name),
            startup_timeout_s=deployment.launch.startup_timeout_s,
            api_key=self.options.api_key or os.environ.get(API_KEY_ENV),
            emulated=self.options.emulator,
        )
        return _PlannedServer(spec, launch, check, release.python, interval, metrics_off)

    def _start(self, deployment: Deployment, variant: Variant) -> RunningVariant:
        planned = self._planned(deployment, variant, f"{deployment.key}-{variant.id}")
        spec, launch, check = planned.spec, planned.launch, planned.check
        name, hf_config = spec.name, deployment.hf_config()
        lease: gpus.Lease | None = None
        if not deployment.runner.is_cpu:  # a CPU server takes no GPU
            if self._allocator is None:
                self._allocator = gpus.GpuAllocator(lock_dir=self._gpu_lock_dir())
            lease = self._allocator.acquire(deployment.launch.tp_size, self.options.gpu_timeout_s, self.progress)
        try:
            running_server = server.launch(spec, lease.cuda_visible_devices if lease else None, self.progress)
        except BaseException:
            if lease:
                lease.release()
            raise
        try:
            facts = server_info.read_facts(running_server.base_url, running_server.headers)
            if problem := _emulation_problem(facts, self.options.emulator):
                raise server.ServerStartError(f"{name}: {problem}")
            if deployment.runner.is_cpu and not facts.emulated and facts.device != "cpu":
                raise server.ServerStartError(
                    f"{name}: CPU runner {deployment.runner.name!r}, but the server says device = {facts.device!r}"
                )
        except BaseException:
            running_server.stop()
            if lease:
                lease.release()
            raise
        # The CPU shim says in the server's log when it told SGLang of an AMX this CPU lacks; the
        # effective args then read intel_amx, so every measurement repeats it.
        shimmed = deployment.runner.is_cpu and AMX_NOTE in running_server.log_tail(100_000)
        return RunningVariant(
            deployment,
            variant,
            launch,
            running_server,
            lease,
            facts,
            gpus.visible_gpus(),
            check,
            planned.python,
            hf_config,
            server_notes=(AMX_NOTE,) if shimmed else (),
            decode_log_interval=planned.interval,
            server_metrics_off=planned.metrics_off,
        )

    def _start_topology(self, deployment: Deployment, variant: Variant) -> topology.RoutedServers:
        """Every role's instances and the router in front (sglperf.session.topology); on a GPU runner each
        instance on GPUs of its own."""
        wide = [r.name for r in _topology_roles(deployment) if r.nodes > 1]
        if wide:
            raise LiveSkip(
                f"{deployment.key}: role(s) {', '.join(wide)} span several nodes: preflight resolves every rank, "
                "but launching a multi-node instance is not built yet (docs/scale-out.md)"
            )
        self._planned_roles = {}

        def spec_for(role_variant: Variant, name: str) -> server.ServerSpec:
            planned = self._planned(deployment, role_variant, name)
            self._planned_roles.setdefault(role_variant.id, planned)
            return planned.spec

        launches = topology.worker_launches(deployment, variant, spec_for)
        if not deployment.runner.is_cpu and deployment.runner.launcher == "local":
            launches = [self._with_gpus(deployment, launch) for launch in launches]
        try:
            return topology.start_topology(
                deployment,
                variant,
                launches,
                lambda name: results_folder.server_log_path(self.options.results_dir, name),
                self.progress,
            )
        except BaseException:
            self._release_topology_leases()
            raise

    def _with_gpus(self, deployment: Deployment, launch: topology.WorkerLaunch) -> topology.WorkerLaunch:
        """The instance on GPUs of its own on this machine (its role's tp x dp), leased like a single server's."""
        if self._allocator is None:
            self._allocator = gpus.GpuAllocator(lock_dir=self._gpu_lock_dir())
        count = launch.role.gpus_per_instance(deployment.launch.tp_size)
        lease = self._allocator.acquire(count, self.options.gpu_timeout_s, self.progress)
        self._topology_leases.append(lease)
        return replace(launch, cuda_visible_devices=lease.cuda_visible_devices)

    def _release_topology_leases(self) -> None:
        leases, self._topology_leases = self._topology_leases, []
        for lease in leases:
            lease.release()

    def _role_view(self, deployment: Deployment, variant: Variant, routed: topology.RoutedServers) -> RunningVariant:
        """The running topology as one role variant sees it: its role's first instance stands for the role."""
        role = variant.role or ""
        view = routed.for_role(role)
        planned = self._planned_roles[variant.id]
        shimmed = deployment.runner.is_cpu and AMX_NOTE in view.log_tail(100_000)
        shape = deployment.topology.describe(deployment.launch.tp_size) if deployment.topology else ""
        where = f"Slurm job {view.allocation.job_id}" if view.allocation else "local processes"
        served = (
            f"topology: {shape} behind sglang-router {router_version()} ({where}); every worker's "
            f"/server_info checked alike; its batch log lines read from {view.stand_in.name}"
        )
        return RunningVariant(
            deployment,
            variant,
            planned.launch,
            view,
            None,
            view.stand_in.facts,
            gpus.visible_gpus(),
            planned.check,
            planned.python,
            deployment.hf_config(),
            server_notes=(served, AMX_NOTE) if shimmed else (served,),
            decode_log_interval=planned.interval,
            # Read at every worker and added up (sglperf.measure.server_scrape.WorkersScraper): the router serves
            # none of theirs.
            server_metrics_off=planned.metrics_off,
        )

    def _attach(self, deployment: Deployment, variant: Variant) -> RunningVariant:
        """The one attached server, claimed by the first variant asked for; never launched or stopped."""
        url = str(self.options.attach_url)
        key = (deployment_key(deployment), variant.id)
        if self._attached_to is not None and self._attached_to != key:
            claimed = f"{Path(self._attached_to[0]).stem}-{self._attached_to[1]}"
            raise server.ServerStartError(
                f"--sglang-url {url} serves one variant and it is {claimed}: select one variant per attached "
                f"run (e.g. -k {deployment.key}-{variant.id})"
            )
        api_key = self.options.api_key or os.environ.get(API_KEY_ENV)
        try:
            facts = read_attached(url, api_key)
            gpus_declared = DeclaredGpus.parse(self.options.attach_gpus) if self.options.attach_gpus else None
        except AttachError as exc:
            self._failures[key] = str(exc)
            raise server.ServerStartError(str(exc)) from None
        if problem := _emulation_problem(facts, self.options.emulator):
            self._failures[key] = f"--sglang-url {url}: {problem}"
            raise server.ServerStartError(self._failures[key])
        problems = attached_profile_problems(facts, deployment, gpus_declared)
        if problems and not self.options.ignore_runner_mismatch:
            raise LiveSkip(
                f"the server at {url} is not runner profile {deployment.runner.name!r}: {'; '.join(problems)} "
                "(pass --ignore-runner-mismatch to check it anyway)"
            )
        self._attached_to = key
        release = self.preflight.resolver(deployment).release()
        launch = launch_plan(
            deployment, variant, release.parser, self._model_path(deployment), deployment.architectures
        )
        inventory = gpus.Inventory(
            tuple(gpus.GPU(i, gpus_declared.name, 0.0) for i in range(gpus_declared.count)) if gpus_declared else (),
            "declared" if gpus_declared else "unknown",
        )
        self.progress(f"{deployment.key}-{variant.id}: attached to {url} (SGLang {facts.version}; not started here)")
        attached = AttachedServer(url, api_key, f"{deployment.key}-{variant.id}")
        check = self.preflight.check(deployment, variant.id)
        return RunningVariant(
            deployment, variant, launch, attached, None, facts, inventory, check, release.python, deployment.hf_config()
        )

    def _attach_topology(self, deployment: Deployment, variant: Variant) -> RunningVariant:
        """A [topology] someone else launched: the router at --sglang-url, its workers as it lists them, each
        read and checked at its own address; never started or stopped here."""
        url = str(self.options.attach_url)
        whole = (deployment_key(deployment), variant.base or variant.id)
        if whole in self._failures:
            raise server.ServerStartError(self._failures[whole])
        if self._routed is None:
            api_key = self.options.api_key or os.environ.get(API_KEY_ENV)

            def read(worker_url: str) -> ServerFacts:
                facts = read_attached(worker_url, api_key)
                if problem := _emulation_problem(facts, self.options.emulator):
                    raise server.ServerStartError(f"{worker_url}: {problem}")
                return facts

            try:
                self._routed = topology.attach_topology(deployment, url, api_key, read)
            except (server.ServerStartError, AttachError, RouterError) as exc:
                self._failures[whole] = str(exc)
                raise server.ServerStartError(str(exc)) from None
            self._routed_key = whole
            self.progress(f"{deployment.key}: attached to the router at {url} and {len(self._routed.workers)} workers")
        elif self._routed_key != whole:
            claimed = f"{Path(self._routed_key[0]).stem}-{self._routed_key[1]}" if self._routed_key else "another"
            raise server.ServerStartError(
                f"--sglang-url {url} serves one variant and it is {claimed}: select one variant per attached run"
            )
        key = (whole[0], variant.id)
        if self.current is None or self.current.key != key:
            release = self.preflight.resolver(deployment).release()
            launch = launch_plan(
                deployment, variant, release.parser, self._model_path(deployment), deployment.architectures
            )
            view = self._routed.for_role(variant.role or "")
            self.current = RunningVariant(
                deployment,
                variant,
                launch,
                view,
                None,
                view.stand_in.facts,
                gpus.Inventory((), "unknown"),
                self.preflight.check(deployment, variant.id),
                release.python,
                deployment.hf_config(),
            )
        return self.current

    def _gpu_lock_dir(self) -> Path | None:
        """Real GPUs are locked machine-wide. Emulated runs lock their simulated GPUs inside their own
        results folder: shared by the run's xdist workers, never contended with an unrelated run."""
        if self.options.emulator and not os.environ.get(gpus.LOCK_DIR_ENV):
            return self.options.results_dir / results_folder.GPU_LOCKS_DIR
        return None  # SGLPERF_GPU_LOCK_DIR, else the machine-wide default

    def _emulator_env(
        self, name: str, check: preflight.VariantCheck, version: str, deployment: Deployment, hf_config: dict[str, Any]
    ) -> dict[str, str]:
        """The emulator's effective args are the real preflight resolution of the same flags.

        Its GPUs have the runner's memory and hold the weights the release builds for this variant
        (`_emulator_weights`), so its KV pool is what a server's would be; --emulator-config overrides.
        """
        resolution = check.resolution
        if resolution is None or resolution.effective is None:
            why = f": {resolution.error.message.splitlines()[0]}" if resolution and resolution.error else ""
            raise server.ServerStartError(
                f"{name}: SGLang {version} refuses this variant{why} (preflight), so the emulator has no "
                "effective args to serve"
            )
        path = results_folder.server_effective_path(self.options.results_dir, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"sglang_version": version, "effective": resolution.effective}))
        user = emulator_config_for(self.options.emulator_config, version, check.variant.id)
        config: dict[str, Any] = {}
        if deployment.runner.memory_gib > 0:  # a CPU runner states none: the emulator's default
            config[EMULATOR_GPU_MEMORY_KEY] = deployment.runner.memory_gib
        if EMULATOR_WEIGHT_KEY not in user:
            config.update(self._emulator_weights(name, version, deployment, resolution, hf_config))
        if EMULATOR_DRIFT_KEY in user:
            config[EMULATOR_DRIFT_EPOCH_KEY] = self.started
        config.update(user)
        return {"SGLPERF_EMULATOR_EFFECTIVE": str(path), "SGLPERF_EMULATOR_CONFIG": json.dumps(config)}

    def _emulator_weights(
        self, name: str, version: str, deployment: Deployment, resolution: Resolution, hf_config: dict[str, Any]
    ) -> dict[str, float]:
        """The weight memory per GPU a server of this variant reports: the target model as the release
        builds it (the vision tower only where it is built), else counted from config.json (text only, as a
        server that skipped the tower), said in a progress line; neither is one line naming the setting."""
        try:
            weights = gpu_weights(
                CheckpointFacts(hf_config), resolution.model, resolution.model_error, deployment.launch.tp_size
            )
        except ValueError as exc:
            raise server.ServerStartError(
                f"{name}: the emulator cannot size this model's weights with SGLang {version} "
                f"({str(exc).splitlines()[0]}): give them in GiB per GPU, e.g. --emulator-config "
                f"'{{\"{EMULATOR_WEIGHT_KEY}\": 20}}'"
            ) from None
        if weights.source != "model build":
            self.progress(f"{name}: emulator weights {weights.text_bytes / GIB:.2f} GiB per GPU, {weights.detail}")
        vision = weights.vision_bytes if weights.vision_built else 0
        return {EMULATOR_WEIGHT_KEY: round(weights.text_bytes / GIB, 3), EMULATOR_VISION_KEY: round(vision / GIB, 3)}

    def verdicts(self, deployment: Deployment, variant: Variant) -> list[Verdict]:
        running = self.running(deployment, variant)
        if not running.verdicts:
            expectations = deployment.expectations_for(variant)
            running.verdicts = live_evidence.check(
                deployment.key,
                variant.id,
                expectations,
                running.facts,
                running.server.log_tail(100_000),
                config=running.hf_config,
                tp=deployment.tp_size_for(variant),
                requested=list(variant.request),
                warnings=running.launch.warnings,
                model=running.predicted_model,
                graph_coverage=live_evidence.LiveCoverage(
                    coverage.workload_batches(deployment, running.facts.effective, variant),
                    _preflight_capture(running, DECODE_GRAPH),
                    coverage.prefill_needs(deployment, running.facts.effective),
                    _preflight_capture(running, PREFILL_GRAPH),
                ),
            )
        return running.verdicts

    def handle(self, deployment: Deployment, variant: Variant) -> ServerHandle:
        """The variant's server for users' own tests (the same one the built-in items use)."""
        running = self.running(deployment, variant)
        attached = running.attached
        return ServerHandle(
            ref=VariantRef(deployment.path, deployment.key, variant.id),
            url=running.server.base_url,
            api_key=running.server.spec.api_key,
            argv=() if attached else running.launch.argv,
            log_path=None if attached else running.server.spec.log_path,
            sglang_version=running.facts.version,
            effective_args=running.facts.effective,
            evidence=tuple(self.verdicts(deployment, variant)),
            emulated=running.facts.emulated,
            attached=attached,
            headers=running.server.headers,
        )

    def divergence(self, deployment: Deployment, variant: Variant) -> tuple[args_divergence.Divergence, list[str]]:
        running = self.running(deployment, variant)
        predicted = running.check.resolution
        effective = predicted.effective if predicted and predicted.effective else {}
        found = args_divergence.divergence(running.facts.effective, effective)
        return found, found.describe(running.facts.effective, effective)

    def measure(
        self, deployment: Deployment, variant: Variant, workload: Workload, load: LoadPoint | int
    ) -> MeasurementRecord:
        """Measure one workload at one load (an int: that concurrency); compare with (or record) the
        variant's baseline."""
        load = load if isinstance(load, LoadPoint) else LoadPoint(load)
        search = (deployment.key, variant.id, workload.id)
        step = load.rate if workload.capacity is not None else None  # a capacity search's rate
        if step is not None and (why := self.capacity_search.why_not_measured(search, workload, step)):
            raise LiveSkip(why)
        running = self.running(deployment, variant)
        wrong_args: list[Verdict] = []
        if self.options.update_baselines:
            checked = [*self.verdicts(deployment, variant), *running.check.verdicts]
            wrong_args = [v for v in checked if v.status.failed]
        record = Measurement(self.options, running, workload, load, self.progress, wrong_args).run()
        self.measured[record.key] = record
        if step is not None:
            self.capacity_search.add(search, step, record)
        return record

    def recorded(
        self, deployment: Deployment, variant_id: str, workload: Workload, load: LoadPoint
    ) -> MeasurementRecord | None:
        """This run's measurement of one variant at one point: this process's, or another xdist worker's file."""
        key = measurement_key(deployment.key, variant_id, workload.id, load.tag)
        this_run = self.options.run.run_id if self.options.run else None
        return self.measured.get(key) or results_folder.this_runs_measurement(self.options.results_dir, key, this_run)

    def effect_records(
        self, deployment: Deployment, variant: Variant, workload: Workload, load: LoadPoint
    ) -> tuple[MeasurementRecord, MeasurementRecord]:
        """This run's measurements of the reference variant and of ``variant`` at one point. LiveSkip when
        either was not measured."""
        ids = (deployment.reference, variant.id)
        records = {v: self.recorded(deployment, v, workload, load) for v in ids}
        reference, measured = records[deployment.reference], records[variant.id]
        if reference is None or measured is None:
            this_run = self.options.run.run_id if self.options.run else None
            failed = results_folder.failed_items_of(self.options.results_dir, this_run)
            missing = [
                _not_measured(measurement_key(deployment.key, v, workload.id, load.tag), failed)
                for v, record in records.items()
                if record is None
            ]
            raise LiveSkip(
                f"{deployment.key}/{variant.id} {workload.id}@{load.tag}: effect not judged: " + "; ".join(missing)
            )
        return reference, measured

    def capacity(self, deployment: Deployment, variant: Variant, workload: Workload) -> CapacityReport:
        """A capacity workload's ladder as this session measured it, judged against the baseline's."""
        return self.capacity_search.report((deployment.key, variant.id, workload.id), workload)

    def stop(self) -> None:
        running, self.current = self.current, None
        routed, self._routed, self._routed_key = self._routed, None, None
        if routed is not None and routed.attached:
            return  # never stopped: not started here
        if routed is not None:
            report = routed.stop()
            self.progress(
                f"{routed.router.spec.name}: stopped the router and {len(routed.workers)} workers "
                f"({len(report.pids)} processes) in {report.seconds:.1f} s"
            )
            indices = tuple(i for lease in self._topology_leases for i in lease.indices)
            if indices:
                check = gpus.wait_gpu_memory_released(report.pids, indices, 120.0)
                if not check.released:
                    self.progress(f"{routed.router.spec.name}: {check.detail}")
            self._release_topology_leases()
            return
        if running is None or isinstance(running.server, AttachedServer):
            return  # an attached server is never stopped
        report = running.server.stop()
        self.progress(
            f"{running.server.spec.name}: stopped {len(report.pids)} processes in {report.seconds:.1f} s"
            + (f" ({len(report.killed)} needed SIGKILL)" if report.killed else "")
        )
        if running.lease is not None:
            check = gpus.wait_gpu_memory_released(report.pids, running.lease.indices, 120.0)
            if not check.released:
                self.progress(f"{running.server.spec.name}: {check.detail}")
            running.lease.release()

    def close(self) -> None:
        self.stop()


@dataclass(frozen=True)
class _PlannedServer:
    """One server spelled for its release, with what its measurements need to know of the spelling."""

    spec: server.ServerSpec
    launch: LaunchPlan
    check: preflight.VariantCheck
    python: str  # the SGLang release's interpreter (preflight's)
    interval: int | None  # the decode log interval as launched
    metrics_off: str | None  # why /metrics is not read


def _topology_roles(deployment: Deployment) -> list[Role]:
    return list(deployment.topology.roles) if deployment.topology else []


def _preflight_capture(running: RunningVariant, graph: coverage.Graph) -> CapturedSizes | None:
    """A graph's sizes and the rule that set them, as preflight resolved this variant."""
    resolution = running.check.resolution
    args = resolution.effective_args if resolution else None
    return coverage.captured_in_args(args, graph) if args else None


def _emulation_problem(facts: ServerFacts, emulator: bool) -> str | None:
    """Which baseline store a measurement uses follows from what this run started (--emulator), never
    from the server's word alone; a server whose word disagrees is refused."""
    if facts.emulated == emulator:
        return None
    if facts.emulated:
        return "the server says it is the emulator, but this run expects SGLang (pass --emulator for the emulator)"
    return "this run expects the emulator (--emulator), but the server does not say it is one"


def _with_decode_log_interval(
    launch: LaunchPlan, deployment: Deployment, variant: Variant, release_has: Callable[[str], bool]
) -> tuple[LaunchPlan, int | None]:
    """The launch with SGLang's decode log interval set so that every measured round logs decode batches
    (`sglperf.sglang.batch_log`), and that interval; a deployment's own setting is kept as it is."""
    flag = batch_log.DECODE_LOG_INTERVAL_FLAG
    own = ParsedArgv(launch.argv).find(flag)
    if own is not None:
        value = own.value or ""
        return launch, int(value) if value.isdigit() else None
    if not release_has(flag) or not deployment.workloads:
        return launch, None
    spec = deployment.speculative_for(variant)
    per_step = max(spec.num_draft_tokens, spec.num_steps + 1) if spec else 1
    interval = batch_log.decode_log_interval_for(min(w.output_len for w in deployment.workloads), per_step)
    return replace(launch, argv=(*launch.argv, flag, str(interval))), interval


def _with_server_metrics(
    launch: LaunchPlan, deployment: Deployment, release_has: Callable[[str], bool]
) -> tuple[LaunchPlan, str | None]:
    """The launch with SGLang's metrics endpoint on, so each round's server metrics are read; or why not."""
    flag = metrics_catalogue.METRICS_FLAG
    if not deployment.launch.server_metrics:
        return launch, "server metrics not read: the deployment sets launch.server_metrics = false"
    if ParsedArgv(launch.argv).find(flag) is not None:
        return launch, None
    if not release_has(flag):
        return launch, f"server metrics not read: this SGLang release has no {flag}"
    return replace(launch, argv=(*launch.argv, flag)), None


def _variant_config(config: dict[str, Any], variant: str) -> dict[str, Any]:
    """--emulator-config with its "variants" table applied: {"variants": {"fast": {"decode_slowdown": 0.9}}}
    gives that variant its own timing, so a test can plant a known difference between variants."""
    per_variant = config.pop("variants", {})
    if not isinstance(per_variant, dict) or not all(isinstance(v, dict) for v in per_variant.values()):
        raise server.ServerStartError('--emulator-config: "variants" must map variant ids to objects')
    return {**config, **per_variant.get(variant, {})}


def emulator_config_for(text: str | None, version: str, variant: str) -> dict[str, Any]:
    """The user's --emulator-config as one variant's servers of one SGLang release get it; bad input is a
    `ServerStartError` naming the option."""
    return _variant_config(_release_config(_user_emulator_config(text), version), variant)


def _release_config(config: dict[str, Any], version: str) -> dict[str, Any]:
    """--emulator-config with its "releases" table applied: {"releases": {"0.5.22": {"decode_slowdown": 1.1}}}
    gives the servers of that SGLang release their own timing, so a test can plant a change in SGLang's code
    (which no effective arg shows) in one release; a "variants" table inside it replaces the top one."""
    per_release = config.pop("releases", {})
    if not isinstance(per_release, dict) or not all(isinstance(v, dict) for v in per_release.values()):
        raise server.ServerStartError('--emulator-config: "releases" must map SGLang versions to objects')
    return {**config, **per_release.get(version, {})}


def _user_emulator_config(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        data = json.loads(read_input(Path(text[1:])) if text.startswith("@") else text)
    except OSError as exc:
        raise server.ServerStartError(f"--emulator-config {text!r}: cannot read it: {os_problem(exc)}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise server.ServerStartError(f"--emulator-config {text!r}: not JSON or @file of JSON ({exc})") from None
    if not isinstance(data, dict):
        raise server.ServerStartError(f"--emulator-config {text!r}: expected a JSON object")
    return data


def _not_measured(key: str, failed: dict[str, str]) -> str:
    """Why this run has no record of ``key``: its item's failure when it failed, else what else it can be."""
    if key in failed:
        return f"{key} failed without a record ({failed[key]})"
    return f"{key} has no record in this run (deselected or skipped; under pytest-xdist: not yet, use --dist loadscope)"
