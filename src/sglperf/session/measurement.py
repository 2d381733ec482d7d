"""One measurement: a workload at one load on a running variant, from its baseline to its record.

The order is the reason this is a unit of its own:
1. provenance, then the baseline looked up once (`regression.look_up`): the sequential plan tests
   against that entry while the rounds run, and the verdict compares with the same entry after them;
2. the meter, sending the load point's plan (`Workload.round_plan`: the prompts cycled to keep its
   concurrency in flight), inside the guards that may drop a round (host load, GPU telemetry) and the
   readers that watch it (the server's /metrics, its log between round marks);
3. what the server ran (batch lines, held against the batch preflight judged the graphs for), what
   disturbed the rounds, the verdict (or the new baseline, refused when the variant's effective args or
   its rounds were wrong), the roofline;
4. the record, written atomically beside its raw result; its numbers are reported even when the
   file cannot be written.
Everything the variant's preflight and config.json say comes from its `RunningVariant`, read once.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from sglperf.baselines import regression, roofline, server_moves, store
from sglperf.baselines.sequential import SequentialPlan, SequentialPlanError
from sglperf.judge import batch_evidence, coverage
from sglperf.measure import meter, synthetic
from sglperf.measure.samples import WorkloadResult
from sglperf.measure.server_scrape import MetricsWatch
from sglperf.model.batch_evidence import BatchEvidence
from sglperf.model.deployment import Deployment, Variant
from sglperf.model.files import os_problem
from sglperf.model.gpu_telemetry import DEFAULT_MAX_GPU_THROTTLE, GpuLimits, GpuTelemetrySummary
from sglperf.model.graph_coverage import WorkloadBatch
from sglperf.model.hardware import memory_bandwidth
from sglperf.model.host_load import DEFAULT_MAX_HOST_LOAD, HostLoadSummary
from sglperf.model.measurement import BaselineStatus, MeasurementRecord, Provenance, Roofline, Rounds
from sglperf.model.metrics import METRICS
from sglperf.model.numbers_source import NumbersSource
from sglperf.model.progress import Progress, say_once
from sglperf.model.prompts import PromptSet, load_prompts
from sglperf.model.server_facts import ServerFacts
from sglperf.model.server_metrics import ServerMetricsRecord
from sglperf.model.verdict import Verdict
from sglperf.model.workload import LoadPoint, RoundPlan, Workload, measurement_key
from sglperf.results import folder as results_folder
from sglperf.runtime import gpu_telemetry, host_probe, provenance
from sglperf.runtime.log_windows import RoundLogWindows
from sglperf.session.running import LiveOptions, RunningVariant
from sglperf.session.topology import RoutedServers
from sglperf.sglang import metrics_catalogue
from sglperf.sglang.intents import DECODE_GRAPH, PREFILL_GRAPH

CPU_NOTE = f"{NumbersSource.CPU_SERVER.words.note}; baselines kept under baselines/cpu/"


def _schedule_notes(workload: Workload, result: WorkloadResult) -> list[str]:
    """Open loop: how closely the meter kept its schedule, and the rounds it fell behind in (dropped)."""
    if workload.rate is None:
        return []
    lags = [r.send_lag_p90_s for r in result.rounds if r.send_lag_p90_s is not None]
    worst = max((r.send_lag_max_s or 0.0 for r in result.rounds), default=0.0)
    notes = [
        f"sent on schedule ({workload.schedule()}): p90 send lag at most {max(lags, default=0.0) * 1e3:.1f} ms "
        f"per round, worst request {worst * 1e3:.1f} ms (limit {meter.send_lag_limit_s(workload.rate) * 1e3:.0f} ms)"
    ]
    behind = [r for r in result.dropped_rounds if r.dropped_because and meter.CLIENT_CAUSE + ":" in r.dropped_because]
    if behind:
        notes.append(f"{len(behind)} round(s) dropped and measured again: the client fell behind its schedule")
    return notes


def _cycle_note(plan: RoundPlan) -> list[str]:
    """Closed or open loop: a round that sends some prompt more than once says so, and what that means."""
    if not plan.cycled:
        return []
    times = -(-plan.requests // plan.prompts)
    return [
        f"prompts cycled: each round sends {plan.requests} requests over {plan.prompts} prompts, in turn (a prompt "
        f"up to {times} times, the same order every round); a repeat may prefill from the radix cache, so TTFT "
        f"is partly a cached prefill's ({plan.requests} prompts would send each once)"
    ]


def baseline_path(options: LiveOptions, running: RunningVariant) -> Path:
    """Where a variant's baseline lives. Emulator and CPU baselines live apart: their numbers must
    never meet a GPU run's."""
    if running.facts.emulated:
        root = options.baselines_dir / "emulator"
    elif running.facts.device == "cpu":
        root = options.baselines_dir / "cpu"
    else:
        root = options.baselines_dir
    return store.path_for(root, running.deployment.runner.name, running.deployment.key, running.variant.id)


@dataclass(frozen=True)
class _Guards:
    """What watches the rounds: each is None where it is not made, with the note saying why."""

    host: meter.HostGuard | None
    host_note: str | None
    gpu: meter.GpuGuard | None
    gpu_note: str | None
    windows: RoundLogWindows | None
    metrics: MetricsWatch | None
    host_limit: float


class Measurement:
    """One workload at one load (a concurrency, or a rate) on ``running``; :meth:`run` measures, judges
    and writes it.

    ``wrong_args``: the variant's failed effective-args verdicts (live and preflight), which refuse a
    baseline refresh; the session passes them only when baselines are being recorded."""

    def __init__(
        self,
        options: LiveOptions,
        running: RunningVariant,
        workload: Workload,
        load: LoadPoint,
        progress: Progress,
        wrong_args: Sequence[Verdict] = (),
    ):
        self.options = options
        self.running = running
        self.workload = workload.at(load)
        self.load = load
        self.concurrency = load.concurrency or 1  # the most in flight; open loop uncapped: set by run()
        self.plan: RoundPlan | None = None  # what every round sends: set by run(), from the prompts
        self.progress = progress
        self.wrong_args = wrong_args
        deployment, variant = running.deployment, running.variant
        self.key = measurement_key(deployment.key, variant.id, workload.id, load.tag)
        self.path = baseline_path(options, running)
        self.thresholds = deployment.thresholds_for(workload)
        self.started_at: str | None = None  # ISO UTC, set when the rounds begin
        self.record_command = f"pytest -k {self.key} --update-baselines" + (
            " --emulator" if running.facts.emulated else ""
        )

    def run(self) -> MeasurementRecord:
        running, workload = self.running, self.workload
        prompts = self._planned_prompts()
        prov = provenance.provenance(
            runner=running.deployment.runner.name,
            facts=running.facts,
            sglang_python=running.sglang_python,
            inventory=running.inventory,
            gpu_indices=running.lease.indices if running.lease else (),
            launch_command=" ".join(running.server.command),
            argv=running.launch.argv,
            root=self.options.root,
        )
        # Recording reads the file itself (store.record), under its own rules for what it may overwrite.
        lookup = None
        if not self.options.update_baselines:
            entry_key = store.entry_key(workload.id, self.concurrency, workload.rate)
            lookup = regression.look_up(self.path, prov, entry_key, self.record_command, workload.schedule(self.plan))
        plan, why = self._sequential_plan(lookup)
        self.started_at = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        result, guards, stop_reasons = self._meter(prompts, plan, lookup)
        return self._judge_and_write(prov, prompts, lookup, plan, why, result, guards, stop_reasons)

    def session_samples(self) -> tuple[str, dict[str, list[float]]]:
        """A further session of a counterbalanced comparison: the same prompts, plan and guards as `run`'s,
        every round of the budget, no baseline and no record of its own: (when it began, metric -> rounds)."""
        prompts = self._planned_prompts()
        started_at = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        result, _, _ = self._meter(prompts, None, None)
        return started_at, regression.round_samples(result)

    def _planned_prompts(self) -> PromptSet:
        """The prompts, with the concurrency and the rounds' plan set from them."""
        prompts = self._prompts()
        # Open loop without a cap: as many in flight as a round sends.
        count = len(prompts.prompts)
        self.concurrency = self.load.concurrency or meter.requests_per_round(self.workload, count)
        self.plan = meter.round_plan(self.workload, count, self.concurrency)  # refuses a load it cannot hold
        return prompts

    def _prompts(self) -> PromptSet:
        running, workload = self.running, self.workload
        if workload.synthetic is not None:
            # In tokens of the tokenizer the server itself loaded, by the interpreter of its release.
            facts = running.facts
            tokenizer = synthetic.TokenizerSource.of_server(facts.effective, running.sglang_python, facts.version)
            prompts = synthetic.prompt_set(workload.synthetic, tokenizer, say=self.progress)
        else:
            assert workload.prompts is not None  # a workload has one or the other (Workload._one_prompt_set)
            prompts = load_prompts(running.deployment.path.parent / workload.prompts)
        if self.workload.max_prompts:
            prompts = replace(prompts, prompts=prompts.prompts[: self.workload.max_prompts])
        return prompts

    def _sequential_plan(self, lookup: regression.BaselineLookup | None) -> tuple[SequentialPlan | None, str]:
        """The plan that may stop the rounds early against the stored entry, or (None, why the full budget runs)."""
        workload = self.workload
        if lookup is None:
            return None, "recording a baseline: the full budget"
        if not workload.sequential:
            return None, "sequential = false"
        if lookup.entry is None:
            return None, lookup.why_not_sequential
        first = min(workload.min_repeats, workload.repeats)
        if workload.repeats <= first:
            return None, f"repeats = {workload.repeats}: no round to save"
        try:
            plan = SequentialPlan(min_rounds=first, max_rounds=workload.repeats)
            plan.nominal_alpha(max((len(v) for v in lookup.entry.samples.values()), default=0))
        except SequentialPlanError as exc:
            return None, f"no sequential plan: {exc}"
        return plan, ""

    def _meter(
        self, prompts: PromptSet, plan: SequentialPlan | None, lookup: regression.BaselineLookup | None
    ) -> tuple[WorkloadResult, _Guards, list[str]]:
        """The rounds, with the sequential plan deciding after each; (result, guards, the plan's last reason)."""
        running, workload = self.running, self.workload
        reasons: list[str] = []

        def on_round(partial: WorkloadResult) -> bool:
            assert plan is not None and lookup is not None and lookup.entry is not None
            current = regression.round_samples(partial)
            decision = plan.decide_all(lookup.entry.samples, current, self.thresholds, lookup.skip)
            reasons[:] = [decision.reason]
            if decision.stop:
                self.progress(f"{self.key}: stopping after {decision.rounds} rounds: {decision.reason}")
            return decision.stop

        kind = f"synthetic prompts ({workload.synthetic.describe()})" if workload.synthetic else "prompts"
        assert self.plan is not None  # set by run()
        if workload.rate is None and self.plan.cycled:
            sends = f"{self.plan.requests} requests cycling {len(prompts.prompts)} {kind}, {self.concurrency} in flight"
        elif workload.rate is None:
            sends = f"{len(prompts.prompts)} {kind}"
        else:
            sends = f"{meter.requests_per_round(workload, len(prompts.prompts))} requests at {workload.schedule()}"
            if workload.synthetic:
                sends += f" from {len(prompts.prompts)} {kind}"
        self.progress(
            f"{self.key}: measuring ({'up to ' if plan else ''}{workload.repeats} rounds of {sends}, "
            f"{workload.output_len} tokens each{', sequential' if plan else ''})"
        )
        guards = self._guards()
        try:
            result = meter.measure(
                running.server.base_url,
                workload,
                prompts,
                api_key=running.server.spec.api_key,
                concurrency=self.concurrency,
                chunk_timeout_s=workload.stall_timeout_s,
                on_round=on_round if plan else None,
                host=guards.host,
                marks=guards.windows,
                metrics=guards.metrics,
                gpu=guards.gpu,
                workers=running.server.worker_urls if isinstance(running.server, RoutedServers) else (),
            )
        finally:
            if guards.gpu is not None:
                guards.gpu.probe.close()
        return result, guards, reasons

    def _guards(self) -> _Guards:
        running = self.running
        limit = self.options.max_host_load or running.deployment.runner.max_host_load or DEFAULT_MAX_HOST_LOAD
        host, host_note = self._host_guard(limit)
        gpu, gpu_note = self._gpu_guard()
        windows = None if running.attached else RoundLogWindows(running.server.spec.log_path)
        return _Guards(host, host_note, gpu, gpu_note, windows, self._metrics_watch(), limit)

    def _judge_and_write(
        self,
        prov: Provenance,
        prompts: PromptSet,
        lookup: regression.BaselineLookup | None,
        plan: SequentialPlan | None,
        why: str,
        result: WorkloadResult,
        guards: _Guards,
        stop_reasons: list[str],
    ) -> MeasurementRecord:
        running, workload = self.running, self.workload
        server_rounds = [r.server for r in result.rounds if r.server is not None]
        server_metrics = ServerMetricsRecord.of(server_rounds, result.server_scrapes) if server_rounds else None
        metrics_note = running.server_metrics_off or (
            f"server metrics not read: {result.metrics_note}" if result.metrics_note else None
        )
        batches, batch_problems, batch_notes = self._batch_evidence(guards.windows, result)
        host = HostLoadSummary.of(
            guards.host_limit,
            [r.host for r in result.rounds if r.host],
            [r.host for r in result.dropped_rounds if r.host and r.host.disturbed(guards.host_limit)],
        )
        gpu_summary = self._gpu_summary(guards.gpu, result)
        if gpu_summary is not None:
            prov = prov.model_copy(update=_gpu_limits(gpu_summary))
        samples = regression.round_samples(result)
        entry = store.make_entry(
            workload.id,
            self.concurrency,
            prompts.digest,
            workload.output_len,
            samples,
            server_moves.baseline_series(server_metrics.series) if server_metrics else None,
            rate=workload.rate,
            schedule=workload.schedule(self.plan),
        )
        if lookup is None:
            verdict = self._record_baseline(prov, entry, batch_problems)
        else:
            verdict = regression.judge_against(
                lookup,
                prov,
                entry,
                self.thresholds,
                missing=self.options.baseline_missing,
                mismatch=self.options.baseline_mismatch,
                plan=plan,
            )
        roof, roof_note = self._roofline(samples)
        notes = ([regression.DUMMY_NOTE] if prov.dummy_weights else []) + verdict.notes + batch_notes
        source = NumbersSource.of(emulated=running.facts.emulated, device=running.facts.device)
        notes[:0] = [*([CPU_NOTE] if source is NumbersSource.CPU_SERVER else []), *running.server_notes]
        if host is not None and (dropped := host.note()):
            notes.append(dropped)
        if gpu_summary is not None and (dropped := gpu_summary.note()):
            notes.append(dropped)
        notes += sorted({r.gpu.note for r in result.rounds if r.gpu and r.gpu.note})
        notes += _schedule_notes(workload, result)
        notes += _cycle_note(self.plan) if self.plan is not None else []
        if roof is not None and roof.problem:  # above the limit: the inputs or the measurement are wrong
            notes.append(roof.problem)
        record = MeasurementRecord(
            key=self.key,
            run_id=self.options.run.run_id if self.options.run else None,
            deployment=running.deployment.key,
            variant=running.variant.id,
            workload=workload.id,
            concurrency=self.concurrency,
            rate=workload.rate,
            sends=self.plan,
            emulated=running.facts.emulated,
            sglang_version=running.facts.version,
            provenance=prov,
            samples=samples,
            summary=entry.summary,
            baseline=str(self.path),
            baseline_status=verdict.status,
            baseline_samples=verdict.stored_samples,
            comparisons=[regression.comparison_record(c) for c in verdict.comparisons],
            notes=notes,
            problems=verdict.problems + batch_problems,
            changes=verdict.changes,
            rounds=self._rounds(plan, why, len(result.rounds), stop_reasons),
            roofline=roof,
            roofline_note=roof_note,
            host=host,
            host_note=guards.host_note,
            batches=batches,
            server_metrics=server_metrics,
            server_metrics_note=metrics_note,
            gpu=gpu_summary,
            gpu_note=guards.gpu_note,
            skip_reason=verdict.skip_reason,
            started_at=self.started_at,
            reference_variant=running.deployment.reference,
            floors={m: self.thresholds.get(m, METRICS[m].default_threshold) for m in samples if m in METRICS},
            expected_effects=running.variant.expect_effect.get(workload.id, {}),
        )
        self._write(record, result)
        return record

    def _rounds(self, plan: SequentialPlan | None, why: str, used: int, stop_reasons: list[str]) -> Rounds:
        budget = self.workload.repeats
        if plan is None:
            reason = why
        elif used < budget:
            reason = stop_reasons[0] if stop_reasons else ""
        else:
            reason = f"budget of {budget} rounds used" + (f" ({stop_reasons[0]})" if stop_reasons else "")
        return Rounds(used=used, budget=budget, sequential=plan is not None, reason=reason)

    def _write(self, record: MeasurementRecord, result: WorkloadResult) -> None:
        folder = self.options.results_dir
        out = results_folder.measurement_path(folder, self.key)
        try:
            if self.options.run is not None and (said := self.options.run.stamp(folder)):
                record.notes.append(said)
            results_folder.write_measurement(record, result.to_record(), folder)
        except OSError as exc:  # the numbers are still reported; the file is not half-written
            record.problems.append(f"{out}: cannot write the measurement record ({os_problem(exc)})")

    def _batch_evidence(
        self, windows: RoundLogWindows | None, result: WorkloadResult
    ) -> tuple[BatchEvidence | None, list[str], list[str]]:
        """What the server logged each measured round ran, judged against the graph intents:
        (evidence, problems, notes)."""
        running = self.running
        if windows is None:
            return None, [], ["batch lines not read: the server is attached, its log is not this run's"]
        measured = {r.round for r in result.rounds}
        evidence = batch_evidence.collect(str(windows.path), windows.texts(measured), running.decode_log_interval)
        problems, notes = batch_evidence.judge(
            evidence,
            running.deployment.expectations_for(running.variant),
            _decode_graph_sizes(running.facts),
            _prefill_graph_sizes(running.facts),
        )
        need = self._stated_batch()
        if need is not None:
            short, said = batch_evidence.judge_in_flight(evidence, need, open_loop=self.workload.rate is not None)
            problems, notes = problems + short, notes + said
        if windows.truncated:
            cut = ", ".join(map(str, windows.truncated))
            notes.append(f"{windows.path}: rounds {cut} logged over {windows.limit_bytes} bytes; read that much")
        if batch_evidence.NO_GRAPH_FIELD in notes:
            say_once(self.progress, f"SGLang {running.facts.version}: {batch_evidence.NO_GRAPH_FIELD}")
        return evidence, problems, notes

    def _stated_batch(self) -> WorkloadBatch | None:
        """The decode batch this load point runs, as preflight's coverage judged it (`coverage.measured_batch`:
        the rounds' plan, capped by the server's max_running_requests); None for an open loop without a cap."""
        if self.plan is None:
            return None
        effective = self.running.facts.effective
        workers = self.running.deployment.decode_workers(self.running.variant)
        return coverage.measured_batch(self.workload, self.load, self.plan.prompts, effective, workers)

    def _metrics_watch(self) -> MetricsWatch | None:
        """What the meter reads from the server's /metrics, or None when it is off for this server."""
        running = self.running
        if running.server_metrics_off is not None:
            return None
        definitions = metrics_catalogue.catalogue(running.sglang_python)
        for series in metrics_catalogue.missing_watched(definitions):
            say_once(self.progress, f"SGLang {running.facts.version} defines no metric for {series}: not watched")
        return MetricsWatch(metrics_catalogue.watched_counters(definitions))

    def _gpu_guard(self) -> tuple[meter.GpuGuard | None, str | None]:
        """GPU telemetry for the rounds (its probe is the caller's to close), or (None, why not)."""
        running = self.running
        runner = running.deployment.runner
        if runner.is_cpu:
            return None, None
        if running.attached:
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

    def _host_guard(self, limit: float) -> tuple[meter.HostGuard | None, str | None]:
        """The busy-host check for the rounds, or (None, why it is not made)."""
        if self.running.attached:
            # Its processes are not ours to tell apart from a neighbour's, and it may run elsewhere.
            return None, "host load not counted: the server is attached, not launched by this run"
        problem = host_probe.available()
        if problem:
            return None, problem
        server = self.running.server
        # Servers run as Slurm steps are the step daemons' children, not ours: counted as ours all the same.
        roots = server.local_roots if isinstance(server, RoutedServers) else None
        return meter.HostGuard(host_probe.HostProbe(roots), limit, self.options.host_quiet_wait_s), None

    @staticmethod
    def _gpu_summary(guard: meter.GpuGuard | None, result: WorkloadResult) -> GpuTelemetrySummary | None:
        if guard is None:
            return None
        return GpuTelemetrySummary.of(
            guard.limits,
            [r.gpu for r in result.rounds if r.gpu],
            [(r.gpu, line) for r in result.dropped_rounds if r.gpu and (line := r.gpu.disturbance(guard.limits))],
        )

    def _roofline(self, samples: dict[str, list[float]]) -> tuple[Roofline | None, str | None]:
        """Decode tok/s against the memory-bandwidth limit, or (None, why not)."""
        running = self.running
        if running.facts.emulated:  # the runner profile's GPU bandwidth is not the emulator's
            return None, roofline.EMULATOR_NOTE
        runner = running.deployment.runner
        bandwidth = memory_bandwidth(runner.gpu_name, runner.memory_bandwidth_gbs)
        if bandwidth is None:
            return None, f"no memory bandwidth known for {runner.gpu_name!r}: set runner.memory_bandwidth_gbs"
        if "decode_tok_s" not in samples:
            return None, "no decode tok/s measured"
        accept = None
        if running.deployment.speculative_for(running.variant) is not None:
            if "accept_length" not in samples:
                return None, "speculative decoding without a measured acceptance length"
            accept = float(np.median(samples["accept_length"]))
        try:
            weights = roofline.weight_bytes_per_step(
                running.predicted_model, running.hf_config, running.deployment.launch.tp_size
            )
            measured = float(np.median(samples["decode_tok_s"]))
            return roofline.decode_roofline(bandwidth, weights, measured, accept, runner.gpu_name), None
        except roofline.RooflineError as exc:
            return None, str(exc)

    def _record_baseline(
        self, prov: Provenance, entry: store.Entry, ran_otherwise: Sequence[str]
    ) -> regression.BaselineVerdict:
        """--update-baselines: only from a variant whose effective args were right and whose rounds ran
        what its intents say (``ran_otherwise``: the batch evidence's problems)."""
        running = self.running
        return record_baseline(
            self.path,
            running.deployment,
            running.variant,
            prov,
            entry,
            wrong_args=self.wrong_args,
            ran_otherwise=ran_otherwise,
            unidentified_server=running.server.base_url if running.inventory.source == "unknown" else None,
        )


def record_baseline(
    path: Path,
    deployment: Deployment,
    variant: Variant,
    prov: Provenance,
    entry: store.Entry,
    *,
    wrong_args: Sequence[Verdict] = (),
    ran_otherwise: Sequence[str] = (),
    unidentified_server: str | None = None,
) -> regression.BaselineVerdict:
    """Writes ``entry`` into the baseline at ``path`` unless the server's GPUs are unknown (an attached
    ``unidentified_server``), the variant's effective args are wrong (``wrong_args``) or its rounds ran
    otherwise (``ran_otherwise``); the verdict says which. A file it cannot read is left as it is."""
    verdict = regression.BaselineVerdict(status=BaselineStatus.RECORDED)
    if unidentified_server is not None:
        verdict.status = BaselineStatus.REFUSED
        verdict.problems.append(
            f"refusing to record a baseline from the attached server {unidentified_server}: its identity is "
            "incomplete (SGLang does not report GPU names); declare them with --sglang-url-gpus COUNTxNAME"
        )
        return verdict
    if wrong_args:
        verdict.status = BaselineStatus.REFUSED
        verdict.problems.append(
            f"refusing to record a baseline for {deployment.key}/{variant.id}: its effective args are wrong ("
            + "; ".join(f"{v.intent} expected {v.expected}, got {v.actual} ({v.tier})" for v in wrong_args)
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


def _gpu_limits(summary: GpuTelemetrySummary) -> dict[str, float]:
    """The provenance fields a GPU summary fills (those NVML reported)."""
    limits = {"gpu_power_limit_w": summary.power_limit_w, "gpu_sm_clock_max_mhz": summary.sm_clock_max_mhz}
    return {field: value for field, value in limits.items() if math.isfinite(value)}


def _decode_graph_sizes(facts: ServerFacts) -> tuple[int, ...]:
    """The batch sizes the server captured its decode graph for: what it reports (0.5.19+:
    ``decode_cuda_graph_bs``), else what its args say it captures; empty when neither says."""
    graph = facts.decode_graph
    if graph is not None and graph[0]:
        return graph[0]
    found = DECODE_GRAPH.captured_sizes(facts.effective)
    return found[0] if found else ()


def _prefill_graph_sizes(facts: ServerFacts) -> tuple[int, ...]:
    """The token sizes the server's args say its prefill graph is captured for; empty when they do not."""
    found = PREFILL_GRAPH.captured_sizes(facts.effective)
    return found[0] if found else ()
