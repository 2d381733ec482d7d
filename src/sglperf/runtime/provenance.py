"""Provenance of a measurement: SGLang, torch, CUDA, driver, GPUs, launch command, effective-args digest."""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import importlib.metadata
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sglperf.model.effective_config import EffectiveConfigRecord
from sglperf.model.measurement import Provenance
from sglperf.model.server_facts import ServerFacts
from sglperf.runtime import gpus
from sglperf.sglang.argv import ParsedArgv
from sglperf.sglang.config_fields import flatten
from sglperf.sglang.flags import LOAD_FORMAT_FLAG
from sglperf.sglang.metrics_catalogue import METRICS_FIELD
from sglperf.sglang.processes import run_bounded
from sglperf.sglang.server_api import KV_POOL_TOKENS_FIELD, LAUNCH_SPECIFIC_FIELDS


def effective_digest(effective: Mapping[str, Any]) -> str:
    """What SGLang decided, as 16 hex digits: equal for two starts of one variant on one build."""
    data = {k: v for k, v in effective.items() if k not in LAUNCH_SPECIFIC_FIELDS}
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def effective_config_record(
    tier: str, deployment: str, variant: str, sglang_version: str, effective: Mapping[str, Any]
) -> EffectiveConfigRecord:
    """The whole effective config as the results folder keeps it, keyed like the baselines."""
    fields = flatten(effective, LAUNCH_SPECIFIC_FIELDS)
    return EffectiveConfigRecord(tier, deployment, variant, sglang_version, effective_digest(effective), fields)


# torch.version is torch/version.py, written when torch was built: run alone, it answers in 0.06 s, where
# importing torch took 2-8 s on a 2-CPU runner in every pytest run that measures.
_TORCH_VERSIONS_CODE = (
    "import importlib.util, json, os, runpy; "
    "spec = importlib.util.find_spec('torch'); "
    "v = runpy.run_path(os.path.join(spec.submodule_search_locations[0], 'version.py')); "
    "print(json.dumps([v['__version__'], v.get('cuda') or 'none']))"
)


@functools.lru_cache(maxsize=8)
def _torch_versions(python: str) -> tuple[str, str]:
    try:
        proc = run_bounded([python, "-c", _TORCH_VERSIONS_CODE], 120)
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


def provenance(
    *,
    runner: str,
    facts: ServerFacts,
    sglang_python: str,
    inventory: gpus.Inventory,
    gpu_indices: Sequence[int],
    launch_command: str,
    argv: Sequence[str],
    root: Path,
) -> Provenance:
    torch_version, cuda = _torch_versions(sglang_python)
    by_index = {g.index: g for g in inventory.gpus}
    names = tuple(by_index[i].name if i in by_index else "unknown" for i in gpu_indices)
    if inventory.source in ("simulated", "declared", "unknown"):
        driver: str = inventory.source  # not this machine's driver: there is none, or the server runs elsewhere
    else:
        driver = _driver_version()
    return Provenance(
        sglang_version=facts.version,
        torch_version=torch_version,
        cuda_version=cuda,
        driver_version=driver,
        gpu_names=names,
        gpu_count=len(gpu_indices),
        runner=runner,
        emulated=facts.emulated,
        harness_version=_harness_version(),
        git_commit=_git_commit(str(root)),
        date=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        effective_args_digest=effective_digest(facts.effective),
        effective_args=flatten(facts.effective, LAUNCH_SPECIFIC_FIELDS),
        launch_command=launch_command,
        dummy_weights=uses_dummy_weights(argv),
        kv_pool_tokens=_kv_pool_tokens(facts.effective),
        server_metrics=facts.effective.get(METRICS_FIELD) is True,
    )


def _kv_pool_tokens(effective: Mapping[str, Any]) -> int | None:
    value = effective.get(KV_POOL_TOKENS_FIELD)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def uses_dummy_weights(argv: Sequence[str]) -> bool:
    load_format = ParsedArgv(argv).find(LOAD_FORMAT_FLAG)  # argparse keeps the last one given
    return load_format is not None and load_format.value == "dummy"


@functools.lru_cache(maxsize=1)
def _driver_version() -> str:
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
        )
        return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 and proc.stdout.strip() else "unknown"
    except OSError:
        return "unknown"
