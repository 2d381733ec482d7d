"""One measurement against its baseline: samples, provenance, comparison, or a new baseline record.

A sample is one round over the workload's prompt set (the mean over that round's requests), so each
sample carries the same prompt mix as the baseline's; rounds are what repeat independently.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.metadata
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sglperf import baseline, gpus, live, meter, stats
from sglperf.flags import LOAD_FORMAT_FLAG

# Metrics meaningless with random weights: what is accepted depends on the model's predictions.
WEIGHT_DEPENDENT = ("accept_length",)
DUMMY_NOTE = "--load-format dummy (random weights): acceptance is meaningless and not compared"


def round_samples(result: meter.WorkloadResult) -> dict[str, list[float]]:
    """Per metric, one value per repeat: the mean over that round's requests."""
    by_round: dict[int, list[meter.RequestSample]] = {}
    for sample in result.samples:
        by_round.setdefault(sample.repeat, []).append(sample)
    out: dict[str, list[float]] = {}
    for metric in stats.METRICS:
        values = []
        for _, samples in sorted(by_round.items()):
            xs = meter.metric_values(samples, metric)
            if xs:
                values.append(float(np.mean(xs)))
        if values:
            out[metric] = values
    return out


@functools.lru_cache(maxsize=8)
def _torch_versions(python: str) -> tuple[str, str]:
    code = "import torch, json; print(json.dumps([torch.__version__, torch.version.cuda or 'none']))"
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
        torch_version, cuda = json.loads(proc.stdout.strip().splitlines()[-1])
        return str(torch_version), str(cuda)
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return "unknown", "unknown"


@functools.lru_cache(maxsize=1)
def _git_commit(root: str) -> str:
    try:
        proc = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return proc.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _harness_version() -> str:
    try:
        return importlib.metadata.version("sglperf")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def provenance(*, runner: str, facts: live.ServerFacts, sglang_python: str, inventory: gpus.Inventory,
               gpu_indices: Sequence[int], launch_command: str, argv: Sequence[str], root: Path) -> baseline.Provenance:
    torch_version, cuda = _torch_versions(sglang_python)
    by_index = {g.index: g for g in inventory.gpus}
    names = tuple(by_index[i].name if i in by_index else "unknown" for i in gpu_indices)
    driver = "simulated" if inventory.source == "simulated" else _driver_version()
    return baseline.Provenance(
        sglang_version=facts.version, torch_version=torch_version, cuda_version=cuda, driver_version=driver,
        gpu_names=names, gpu_count=len(gpu_indices), runner=runner, emulated=facts.emulated,
        harness_version=_harness_version(), git_commit=_git_commit(str(root)),
        date=_dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        effective_args_digest=baseline.effective_digest(facts.effective, sorted(live.EXPECTED_DRIFT)),
        launch_command=launch_command, dummy_weights=uses_dummy_weights(argv))


def uses_dummy_weights(argv: Sequence[str]) -> bool:
    return any(a == LOAD_FORMAT_FLAG and i + 1 < len(argv) and argv[i + 1] == "dummy" or a == f"{LOAD_FORMAT_FLAG}=dummy"
               for i, a in enumerate(argv))


@functools.lru_cache(maxsize=1)
def _driver_version() -> str:
    try:
        proc = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=15)
        return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else "unknown"
    except OSError:
        return "unknown"


@dataclass
class Outcome:
    """What a measurement item reports."""

    key: str
    comparisons: list[stats.Comparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    baseline_status: str = "compared"  # compared | missing | mismatch | recorded | refused
    problems: list[str] = field(default_factory=list)  # why it fails, one line each
    skip_reason: str | None = None
    changes: list[str] = field(default_factory=list)  # what a refresh changed

    @property
    def regressions(self) -> list[stats.Comparison]:
        return [c for c in self.comparisons if c.outcome in (stats.Outcome.REGRESSION, stats.Outcome.INSUFFICIENT)]


def compare(outcome: Outcome, path: Path, prov: baseline.Provenance, entry: baseline.Entry,
            thresholds: Mapping[str, float], *, missing: str, mismatch: str, record_command: str) -> None:
    """Fill ``outcome`` with the comparison against the stored baseline (or why there is none)."""
    def not_compared(status: str, message: str, policy: str) -> None:
        outcome.baseline_status = status
        if policy == "skip":
            outcome.skip_reason = message
        else:
            outcome.problems.append(message)

    try:
        stored = baseline.load(path)
    except baseline.BaselineError as exc:
        if "no baseline" in str(exc):
            not_compared("missing", f"no baseline for {entry.key} at {path}; record it with: {record_command}", missing)
        else:
            not_compared("unreadable", str(exc), "fail")
        return
    stored_entry = stored.entries.get(entry.key)
    if stored_entry is None:
        not_compared("missing", f"{path} has no entry {entry.key}; record it with: {record_command}", missing)
        return
    identity = baseline.identity_problems(stored, prov)
    if identity:
        not_compared("mismatch", f"baseline {path} is not comparable with this run: {'; '.join(identity)}", mismatch)
        return
    outcome.notes += baseline.context_notes(stored, stored_entry, prov, entry.prompt_digest)
    skip = WEIGHT_DEPENDENT if prov.dummy_weights or stored.provenance.dummy_weights else ()
    if stored.provenance.dummy_weights and not prov.dummy_weights:
        outcome.notes.append("the baseline was recorded with dummy weights: acceptance not compared")
    outcome.comparisons = baseline.compare_entry(stored_entry, entry.samples, thresholds, skip)
    outcome.problems += [c.message() for c in outcome.regressions]


def comparison_record(c: stats.Comparison) -> dict[str, Any]:
    return {"metric": c.metric, "baseline_median": c.baseline_median, "current_median": c.current_median,
            "change": c.change, "threshold": c.threshold, "p_value": c.p_value, "outcome": c.outcome.value,
            "message": c.message(), "n_baseline": c.n_baseline, "n_current": c.n_current}
