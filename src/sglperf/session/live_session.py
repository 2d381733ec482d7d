"""The run's live state: one server per variant, one variant at a time, and its measurements.

The pytest plugin only maps items onto these objects, so the same run can be driven from code.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from sglperf import preflight
from sglperf.baselines import regression, roofline, server_moves, store
from sglperf.baselines.sequential import SequentialPlan
from sglperf.history.results_folder import RunStamp
from sglperf.judge import batch_evidence, live_evidence
from sglperf.judge import drift as drift_check
from sglperf.measure import meter
from sglperf.measure.prompts import load_prompts
from sglperf.measure.samples import WorkloadResult
from sglperf.measure.server_scrape import MetricsWatch
from sglperf.model.batch_evidence import BatchEvidence
from sglperf.model.deployment import Deployment, Variant, Workload
from sglperf.model.files import os_problem, read_input, strict_json, write_text_atomic
from sglperf.model.gpu_telemetry import DEFAULT_MAX_GPU_THROTTLE, GpuLimits, GpuTelemetrySummary
from sglperf.model.hardware import memory_bandwidth
from sglperf.model.host_load import DEFAULT_MAX_HOST_LOAD, HostLoadSummary
from sglperf.model.measurement import BaselineStatus, MeasurementRecord, Provenance, Roofline, Rounds
from sglperf.model.progress import Progress, say_once
from sglperf.model.resolution import ModelFacts
from sglperf.model.server_facts import ServerFacts
from sglperf.model.server_metrics import ServerMetricsRecord
from sglperf.model.verdict import Verdict
from sglperf.runtime import gpu_telemetry, gpus, host_probe, provenance, server, server_info
from sglperf.runtime.attach import AttachedServer, AttachError, DeclaredGpus, attached_profile_problems, read_attached
from sglperf.runtime.log_windows import RoundLogWindows
from sglperf.session.handles import ServerHandle, VariantRef
from sglperf.session.preflight_session import PreflightSession, deployment_key
from sglperf.sglang import batch_log, envs, metrics_catalogue, modelsize
from sglperf.sglang.cpu_shim import AMX_NOTE
from sglperf.sglang.flags import LaunchPlan, plan

MODEL_PATH_ENV = "SGLPERF_MODEL_PATH"
CPU_NOTE = "CPU server (device cpu): CPU numbers, not GPU results; baselines kept under baselines/cpu/"
API_KEY_ENV = "SGLPERF_API_KEY"


@dataclass(frozen=True)
class LiveOptions:
    emulator: bool = False
    emulator_config: str | None = None  # JSON or @file, passed to the emulator
    model_path: str | None = None
    api_key: str | None = None
    results_dir: Path = Path("results")
    run: RunStamp | None = None  # the run's id, stamped on its results folder and records
    ignore_runner_mismatch: bool = False
    gpu_timeout_s: float = 3600.0
    baselines_dir: Path = Path("baselines")
    update_baselines: bool = False
    baseline_missing: str = "fail"  # or "skip"
    baseline_mismatch: str = "fail"  # or "skip"
    root: Path = Path(".")
    attach_url: str | None = None  # a running server to check instead of launching one
    attach_gpus: str | None = None  # the attached server's GPUs as its operator declares them (COUNTxNAME)
    max_host_load: float | None = None  # share of this machine's CPU others may take in a round; None:
    # the runner profile's max_host_load, else DEFAULT_MAX_HOST_LOAD
    host_quiet_wait_s: float = 60.0  # per measurement, for a quiet host and GPU after a dropped round
    max_gpu_throttle: float | None = None  # share of a round a GPU may run throttled; None: the runner's, else
    # DEFAULT_MAX_GPU_THROTTLE
    gpu_telemetry: bool = True  # False: no GPU telemetry (--no-gpu-telemetry)


class LiveSkip(Exception):
    """Live items of this deployment cannot run here; the message says why and what to do."""


@dataclass
class RunningVariant:
    deployment: Deployment
    variant: Variant
    plan: LaunchPlan
    server: server.Server | AttachedServer
    lease: gpus.Lease | None
    facts: ServerFacts
    inventory: gpus.Inventory
    verdicts: list[Verdict] = field(default_factory=list)
    server_notes: tuple[str, ...] = ()  # what every measurement on this server should say about it
    decode_log_interval: int | None = None  # as launched; None: the release's default, or not ours to set
    server_metrics: str | None = None  # why /metrics is not read ("" never: None means it is read)

    @property
    def key(self) -> tuple[str, str]:
        return (deployment_key(self.deployment), self.variant.id)


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
            problem = envs.runner_cpu_problem(deployment.runner.kernel)
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

    def running(self, deployment: Deployment, variant: Variant) -> RunningVariant:
        key = (deployment_key(deployment), variant.id)
        if key in self._failures:
            raise server.ServerStartError(self._failures[key])
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

    def _start(self, deployment: Deployment, variant: Variant) -> RunningVariant:
        check = self.preflight.check(deployment, variant.id)
        release = self.preflight.resolver(deployment).release()
        launch = plan(deployment, variant, release.parser, self._model_path(deployment), deployment.architectures)
        launch, interval = _with_decode_log_interval(launch, deployment, variant, release.parser.has)
        launch, metrics_off = _with_server_metrics(launch, deployment, release.parser.has)
        name = f"{deployment.key}-{variant.id}"
        env = dict(launch.env)
        if self.options.emulator:
            env.update(self._emulator_env(name, check, release.version, deployment, launch))
        lease: gpus.Lease | None = None
        if not deployment.runner.is_cpu:  # a CPU server takes no GPU
            if self._allocator is None:
                self._allocator = gpus.GpuAllocator(lock_dir=self._gpu_lock_dir())
            lease = self._allocator.acquire(deployment.launch.tp_size, self.options.gpu_timeout_s, self.progress)
        # The emulator is part of sglperf, so it runs under sglperf's interpreter, not SGLang's.
        python = sys.executable if self.options.emulator else self.preflight.resolver(deployment).python
        spec = server.ServerSpec(
            name=name,
            python=python,
            argv=launch.argv,
            env=env,
            log_path=self.options.results_dir / "servers" / f"{name}.log",
            startup_timeout_s=deployment.launch.startup_timeout_s,
            api_key=self.options.api_key or os.environ.get(API_KEY_ENV),
            emulated=self.options.emulator,
        )
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
            server_notes=(AMX_NOTE,) if shimmed else (),
            decode_log_interval=interval,
            server_metrics=metrics_off,
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
        launch = plan(deployment, variant, release.parser, self._model_path(deployment), deployment.architectures)
        inventory = gpus.Inventory(
            tuple(gpus.GPU(i, gpus_declared.name, 0.0) for i in range(gpus_declared.count)) if gpus_declared else (),
            "declared" if gpus_declared else "unknown",
        )
        self.progress(f"{deployment.key}-{variant.id}: attached to {url} (SGLang {facts.version}; not started here)")
        attached = AttachedServer(url, api_key, f"{deployment.key}-{variant.id}")
        return RunningVariant(deployment, variant, launch, attached, None, facts, inventory)

    def _gpu_lock_dir(self) -> Path | None:
        """Real GPUs are locked machine-wide. Emulated runs lock their simulated GPUs inside their own
        results folder: shared by the run's xdist workers, never contended with an unrelated run."""
        if self.options.emulator and not os.environ.get(gpus.LOCK_DIR_ENV):
            return self.options.results_dir / ".gpu-locks"
        return None  # SGLPERF_GPU_LOCK_DIR, else the machine-wide default

    def _emulator_env(
        self, name: str, check: preflight.VariantCheck, version: str, deployment: Deployment, launch: LaunchPlan
    ) -> dict[str, str]:
        """The emulator's effective args are the real preflight resolution of the same flags.

        Its weight memory defaults to the model's text-only size (plus the MTP layer when speculative
        decoding is on), like a server that skipped the vision tower; --emulator-config overrides.
        """
        if check.resolution is None or check.resolution.effective is None:
            raise server.ServerStartError(
                f"{name}: preflight could not resolve this variant, so the emulator "
                "has no effective args to serve (see the preflight items)"
            )
        path = self.options.results_dir / "servers" / f"{name}.effective.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"sglang_version": version, "effective": check.resolution.effective}))
        size = modelsize.model_size(deployment.hf_config())
        mtp = deployment.speculative_for(check.variant) is not None
        config: dict[str, Any] = {
            "weight_gb_per_gpu": round(
                size.weight_gib_per_gpu(deployment.launch.tp_size, vision=False, vision_replicated=False, mtp=mtp), 3
            )
        }
        config.update(_user_emulator_config(self.options.emulator_config))
        return {"SGLPERF_EMULATOR_EFFECTIVE": str(path), "SGLPERF_EMULATOR_CONFIG": json.dumps(config)}

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
                config=deployment.hf_config(),
                tp=deployment.launch.tp_size,
                requested=list(variant.request),
                warnings=running.plan.warnings,
                model=self._predicted_model(deployment, variant),
            )
        return running.verdicts

    def handle(self, deployment: Deployment, variant: Variant) -> ServerHandle:
        """The variant's server for users' own tests (the same one the built-in items use)."""
        running = self.running(deployment, variant)
        attached = isinstance(running.server, AttachedServer)
        return ServerHandle(
            ref=VariantRef(deployment.path, deployment.key, variant.id),
            url=running.server.base_url,
            api_key=running.server.spec.api_key,
            argv=() if attached else running.plan.argv,
            log_path=None if attached else running.server.spec.log_path,
            sglang_version=running.facts.version,
            effective_args=running.facts.effective,
            evidence=tuple(self.verdicts(deployment, variant)),
            emulated=running.facts.emulated,
            attached=attached,
            headers=running.server.headers,
        )

    def _predicted_model(self, deployment: Deployment, variant: Variant) -> ModelFacts | None:
        resolution = self.preflight.check(deployment, variant.id).resolution
        return resolution.model if resolution else None

    def drift(self, deployment: Deployment, variant: Variant) -> tuple[drift_check.Drift, list[str]]:
        running = self.running(deployment, variant)
        predicted = self.preflight.check(deployment, variant.id).resolution
        effective = predicted.effective if predicted and predicted.effective else {}
        found = drift_check.drift(running.facts.effective, effective)
        return found, found.describe(running.facts.effective, effective)

    def measure(
        self, deployment: Deployment, variant: Variant, workload: Workload, concurrency: int
    ) -> MeasurementRecord:
        """Measure one workload at one concurrency; compare with (or record) the variant's baseline."""
        running = self.running(deployment, variant)
        key = f"{deployment.key}-{variant.id}-{workload.id}-c{concurrency}"
        prompts = load_prompts(deployment.path.parent / workload.prompts)
        if workload.max_prompts:
            prompts = replace(prompts, prompts=prompts.prompts[: workload.max_prompts])
        prov = provenance.provenance(
            runner=deployment.runner.name,
            facts=running.facts,
            sglang_python=self.preflight.resolver(deployment).python,
            inventory=running.inventory,
            gpu_indices=running.lease.indices if running.lease else (),
            launch_command=" ".join(running.server.command),
            argv=running.plan.argv,
            root=self.options.root,
        )
        path = self.baseline_path(deployment, variant, running.facts.emulated, running.facts.device)
        plan: SequentialPlan | None = None
        stored: store.Entry | None = None
        skip: tuple[str, ...] = ()
        why = "sequential = false"
        if workload.sequential and not self.options.update_baselines:
            stored, skip, why = regression.comparable_entry(path, prov, store.entry_key(workload.id, concurrency))
            if stored is not None:
                plan, why = _sequential_plan(workload, stored)
        elif self.options.update_baselines:
            why = "recording a baseline: the full budget"
        reasons: list[str] = []
        thresholds = deployment.thresholds_for(workload)

        def on_round(partial: WorkloadResult) -> bool:
            assert plan is not None and stored is not None
            current = regression.round_samples(partial)
            decision = plan.decide_all(stored.samples, current, thresholds, skip)
            reasons[:] = [decision.reason]
            if decision.stop:
                self.progress(f"{key}: stopping after {decision.rounds} rounds: {decision.reason}")
            return decision.stop

        self.progress(
            f"{key}: measuring ({'up to ' if plan else ''}{workload.repeats} rounds of {len(prompts.prompts)} prompts, "
            f"{workload.output_len} tokens each{', sequential' if plan else ''})"
        )
        limit = self.options.max_host_load or deployment.runner.max_host_load or DEFAULT_MAX_HOST_LOAD
        guard, host_note = self._host_guard(running, limit)
        gpu_guard, gpu_note = self._gpu_guard(running)
        windows = None if isinstance(running.server, AttachedServer) else RoundLogWindows(running.server.spec.log_path)
        watch = self._metrics_watch(running)
        try:
            result = meter.measure(
                running.server.base_url,
                workload,
                prompts,
                api_key=running.server.spec.api_key,
                concurrency=concurrency,
                chunk_timeout_s=workload.stall_timeout_s,
                on_round=on_round if plan else None,
                host=guard,
                marks=windows,
                metrics=watch,
                gpu=gpu_guard,
            )
        finally:
            if gpu_guard is not None:
                gpu_guard.probe.close()
        server_rounds = [r.server for r in result.rounds if r.server is not None]
        server_metrics = ServerMetricsRecord.of(server_rounds, result.server_scrapes) if server_rounds else None
        metrics_note = running.server_metrics or (
            f"server metrics not read: {result.metrics_note}" if result.metrics_note else None
        )
        batches, batch_problems, batch_notes = self._batch_evidence(running, windows, result)
        host = HostLoadSummary.of(
            limit,
            [r.host for r in result.rounds if r.host],
            [r.host for r in result.dropped_rounds if r.host and r.host.disturbed(limit)],
        )
        gpu_summary = (
            GpuTelemetrySummary.of(
                gpu_guard.limits,
                [r.gpu for r in result.rounds if r.gpu],
                [
                    (r.gpu, line)
                    for r in result.dropped_rounds
                    if r.gpu and (line := r.gpu.disturbance(gpu_guard.limits))
                ],
            )
            if gpu_guard is not None
            else None
        )
        gpu_notes = sorted({r.gpu.note for r in result.rounds if r.gpu and r.gpu.note})
        if gpu_summary is not None:
            prov = prov.model_copy(update=_gpu_limits(gpu_summary))
        samples = regression.round_samples(result)
        used = len(result.rounds)
        if plan is None:
            reason = why
        elif used < workload.repeats:
            reason = reasons[0] if reasons else ""
        else:
            reason = f"budget of {workload.repeats} rounds used" + (f" ({reasons[0]})" if reasons else "")
        rounds = Rounds(used=used, budget=workload.repeats, sequential=plan is not None, reason=reason)
        entry = store.make_entry(
            workload.id,
            concurrency,
            prompts.digest,
            workload.output_len,
            samples,
            server_moves.baseline_series(server_metrics.series) if server_metrics else None,
        )
        if self.options.update_baselines:
            verdict = self._record(path, deployment, variant, prov, entry, batch_problems)
        else:
            record_command = f"pytest -k {key} --update-baselines" + (" --emulator" if running.facts.emulated else "")
            verdict = regression.compare_to_baseline(
                path,
                prov,
                entry,
                thresholds,
                missing=self.options.baseline_missing,
                mismatch=self.options.baseline_mismatch,
                record_command=record_command,
                plan=plan,
            )
        roof, roof_note = self._roofline(deployment, variant, samples)
        notes = ([regression.DUMMY_NOTE] if prov.dummy_weights else []) + verdict.notes + batch_notes
        if running.facts.device == "cpu" and not running.facts.emulated:
            notes[:0] = [CPU_NOTE, *running.server_notes]
        if host is not None and (dropped := host.note()):
            notes.append(dropped)
        if gpu_summary is not None and (dropped := gpu_summary.note()):
            notes.append(dropped)
        notes += gpu_notes
        record = MeasurementRecord(
            key=key,
            run_id=self.options.run.run_id if self.options.run else None,
            deployment=deployment.key,
            variant=variant.id,
            workload=workload.id,
            concurrency=concurrency,
            emulated=running.facts.emulated,
            sglang_version=running.facts.version,
            provenance=prov,
            samples=samples,
            summary=entry.summary,
            baseline=str(path),
            baseline_status=verdict.status,
            baseline_samples=verdict.stored_samples,
            comparisons=[regression.comparison_record(c) for c in verdict.comparisons],
            notes=notes,
            problems=verdict.problems + batch_problems,
            changes=verdict.changes,
            rounds=rounds,
            roofline=roof,
            roofline_note=roof_note,
            host=host,
            host_note=host_note,
            batches=batches,
            server_metrics=server_metrics,
            server_metrics_note=metrics_note,
            gpu=gpu_summary,
            gpu_note=gpu_note,
            skip_reason=verdict.skip_reason,
        )
        out = self.options.results_dir / "measurements" / f"{key}.json"
        written = {**record.model_dump(mode="json"), "result": result.to_record()}
        try:
            if self.options.run is not None:
                self.options.run.stamp(self.options.results_dir)
            write_text_atomic(out, strict_json(written, indent=1, sort_keys=True, default=str))
        except OSError as exc:  # the numbers above are still reported; the file is not half-written
            record.problems.append(f"{out}: cannot write the measurement record ({os_problem(exc)})")
        return record

    def _batch_evidence(
        self, running: RunningVariant, windows: RoundLogWindows | None, result: WorkloadResult
    ) -> tuple[BatchEvidence | None, list[str], list[str]]:
        """What the server logged each measured round ran, judged against the graph intents:
        (evidence, problems, notes)."""
        if windows is None:
            return None, [], ["batch lines not read: the server is attached, its log is not this run's"]
        measured = {r.round for r in result.rounds}
        evidence = batch_evidence.collect(str(windows.path), windows.texts(measured), running.decode_log_interval)
        problems, notes = batch_evidence.judge(evidence, running.deployment.expectations_for(running.variant))
        if windows.truncated:
            cut = ", ".join(map(str, windows.truncated))
            notes.append(f"{windows.path}: rounds {cut} logged over {windows.limit_bytes} bytes; read that much")
        if batch_evidence.NO_GRAPH_FIELD in notes:
            say_once(self.progress, f"SGLang {running.facts.version}: {batch_evidence.NO_GRAPH_FIELD}")
        return evidence, problems, notes

    def _metrics_watch(self, running: RunningVariant) -> MetricsWatch | None:
        """What the meter reads from the server's /metrics, or None when it is off for this server."""
        if running.server_metrics is not None:
            return None
        definitions = metrics_catalogue.catalogue(self.preflight.resolver(running.deployment).python)
        for series in metrics_catalogue.missing_watched(definitions):
            say_once(self.progress, f"SGLang {running.facts.version} defines no metric for {series}: not watched")
        return MetricsWatch(metrics_catalogue.watched_counters(definitions))

    def _gpu_guard(self, running: RunningVariant) -> tuple[meter.GpuGuard | None, str | None]:
        """GPU telemetry for a measurement (its probe is the caller's to close), or (None, why not)."""
        runner = running.deployment.runner
        if runner.is_cpu:
            return None, None
        if isinstance(running.server, AttachedServer):
            return None, "GPU telemetry not read: the server is attached, its GPUs are not known to be this machine's"
        if not (self.options.gpu_telemetry and runner.gpu_telemetry):
            return None, "GPU telemetry off (--no-gpu-telemetry, or the runner's gpu_telemetry = false)"
        # NVML indices differ from CUDA's unless both order by PCI bus: GPUs are named by UUID where known.
        leased = set(running.lease.indices) if running.lease else set()
        uuids = [g.uuid for g in running.inventory.gpus if g.index in leased and g.uuid]
        try:
            probe = gpu_telemetry.open_probe(uuids if running.inventory.source == "nvml" and uuids else None)
        except gpu_telemetry.NvmlUnusable as exc:
            note = f"GPU telemetry not read: {exc}"
            say_once(self.progress, note)
            return None, note
        limits = GpuLimits(
            max_throttle=self.options.max_gpu_throttle or runner.max_gpu_throttle or DEFAULT_MAX_GPU_THROTTLE,
            ignore_processes=tuple(runner.gpu_ignore_processes),
        )
        return meter.GpuGuard(probe, limits, self.options.host_quiet_wait_s), None

    def _host_guard(self, running: RunningVariant, limit: float) -> tuple[meter.HostGuard | None, str | None]:
        """The busy-host check for a measurement, or (None, why it is not made)."""
        if isinstance(running.server, AttachedServer):
            # Its processes are not ours to tell apart from a neighbour's, and it may run elsewhere.
            return None, "host load not counted: the server is attached, not launched by this run"
        problem = host_probe.available()
        if problem:
            return None, problem
        return meter.HostGuard(host_probe.HostProbe(), limit, self.options.host_quiet_wait_s), None

    def _roofline(
        self, deployment: Deployment, variant: Variant, samples: dict[str, list[float]]
    ) -> tuple[Roofline | None, str | None]:
        """Decode tok/s against the memory-bandwidth limit, or (None, why not)."""
        runner = deployment.runner
        bandwidth = memory_bandwidth(runner.gpu_name, runner.memory_bandwidth_gbs)
        if bandwidth is None:
            return None, f"no memory bandwidth known for {runner.gpu_name!r}: set runner.memory_bandwidth_gbs"
        if "decode_tok_s" not in samples:
            return None, "no decode tok/s measured"
        accept = None
        if deployment.speculative_for(variant) is not None:
            if "accept_length" not in samples:
                return None, "speculative decoding without a measured acceptance length"
            accept = float(np.median(samples["accept_length"]))
        try:
            weights = roofline.weight_bytes_per_step(
                self._predicted_model(deployment, variant), deployment.hf_config(), deployment.launch.tp_size
            )
            measured = float(np.median(samples["decode_tok_s"]))
            return roofline.decode_roofline(bandwidth, weights, measured, accept, runner.gpu_name), None
        except ValueError as exc:
            return None, str(exc)

    def baseline_path(self, deployment: Deployment, variant: Variant, emulated: bool, device: str = "cuda") -> Path:
        # Emulator and CPU baselines live apart: their numbers must never meet a GPU run's.
        if emulated:
            root = self.options.baselines_dir / "emulator"
        elif device == "cpu":
            root = self.options.baselines_dir / "cpu"
        else:
            root = self.options.baselines_dir
        return store.path_for(root, deployment.runner.name, deployment.key, variant.id)

    def _record(
        self,
        path: Path,
        deployment: Deployment,
        variant: Variant,
        prov: Provenance,
        entry: store.Entry,
        ran_otherwise: Sequence[str] = (),
    ) -> regression.BaselineVerdict:
        """--update-baselines: only from a variant whose effective args were right and whose rounds ran
        what its intents say (``ran_otherwise``: the batch evidence's problems)."""
        verdict = regression.BaselineVerdict(status=BaselineStatus.RECORDED)
        running = self.current
        if running is not None and running.inventory.source == "unknown":
            verdict.status = BaselineStatus.REFUSED
            verdict.problems.append(
                f"refusing to record a baseline from the attached server {running.server.base_url}: its identity is "
                "incomplete (SGLang does not report GPU names); declare them with --sglang-url-gpus COUNTxNAME"
            )
            return verdict
        checked = [*self.verdicts(deployment, variant), *self.preflight.check(deployment, variant.id).verdicts]
        bad = [v for v in checked if v.status.failed]
        if bad:
            verdict.status = BaselineStatus.REFUSED
            verdict.problems.append(
                f"refusing to record a baseline for {deployment.key}/{variant.id}: its effective args are wrong ("
                + "; ".join(f"{v.intent} expected {v.expected}, got {v.actual} ({v.tier})" for v in bad)
                + ")"
            )
            return verdict
        if ran_otherwise:
            verdict.status = BaselineStatus.REFUSED
            verdict.problems.append(
                f"refusing to record a baseline for {deployment.key}/{variant.id}: its rounds did not run what "
                "its intents say (below)"
            )
            return verdict
        try:
            old, new = store.record(path, deployment.key, variant.id, prov, entry)
        except store.BaselineError as exc:  # an existing file it cannot read: left as it is
            verdict.status = BaselineStatus.UNREADABLE
            verdict.problems.append(str(exc))
            return verdict
        verdict.changes = store.describe_change(old, new, entry.key)
        return verdict

    def stop(self) -> None:
        running, self.current = self.current, None
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
    own = next((i for i, token in enumerate(launch.argv) if token.split("=", 1)[0] == flag), None)
    if own is not None:
        token = launch.argv[own]
        value = token.split("=", 1)[1] if "=" in token else (launch.argv[own + 1] if own + 1 < len(launch.argv) else "")
        return launch, int(value) if value.isdigit() else None
    if not release_has(flag) or not deployment.workloads:
        return launch, None
    spec = deployment.speculative_for(variant)
    per_step = max(spec.num_draft_tokens, spec.num_steps + 1) if spec else 1
    interval = batch_log.decode_log_interval_for(min(w.output_len for w in deployment.workloads), per_step)
    return replace(launch, argv=(*launch.argv, flag, str(interval))), interval


def _gpu_limits(summary: GpuTelemetrySummary) -> dict[str, float]:
    """The provenance fields a GPU summary fills (those NVML reported)."""
    limits = {"gpu_power_limit_w": summary.power_limit_w, "gpu_sm_clock_max_mhz": summary.sm_clock_max_mhz}
    return {field: value for field, value in limits.items() if math.isfinite(value)}


def _with_server_metrics(
    launch: LaunchPlan, deployment: Deployment, release_has: Callable[[str], bool]
) -> tuple[LaunchPlan, str | None]:
    """The launch with SGLang's metrics endpoint on, so each round's server metrics are read; or why not."""
    flag = metrics_catalogue.METRICS_FLAG
    if not deployment.launch.server_metrics:
        return launch, "server metrics not read: the deployment sets launch.server_metrics = false"
    if any(token.split("=", 1)[0] == flag for token in launch.argv):
        return launch, None
    if not release_has(flag):
        return launch, f"server metrics not read: this SGLang release has no {flag}"
    return replace(launch, argv=(*launch.argv, flag)), None


def _sequential_plan(workload: Workload, stored: store.Entry) -> tuple[SequentialPlan | None, str]:
    """The plan for a workload against its stored entry, or (None, why the full budget runs)."""
    first = min(workload.min_repeats, workload.repeats)
    if workload.repeats <= first:
        return None, f"repeats = {workload.repeats}: no round to save"
    try:
        plan = SequentialPlan(min_rounds=first, max_rounds=workload.repeats)
        plan.nominal_alpha(max((len(v) for v in stored.samples.values()), default=0))
    except ValueError as exc:
        return None, f"no sequential plan: {exc}"
    return plan, ""


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
