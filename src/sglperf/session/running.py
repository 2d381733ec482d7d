"""A live session's options and the state of the one variant it runs: what a measurement reads.

Everything a variant's measurements need from preflight and the model's config.json is read once,
when the variant's server starts (or is attached), and kept here: a measurement never asks again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglperf import preflight
from sglperf.model.deployment import Deployment, Variant
from sglperf.model.resolution import ModelFacts
from sglperf.model.server_facts import ServerFacts
from sglperf.model.verdict import Verdict
from sglperf.results.folder import RunStamp
from sglperf.runtime import gpus, server
from sglperf.runtime.attach import AttachedServer
from sglperf.session.preflight_session import deployment_key
from sglperf.session.topology import RoutedServers
from sglperf.sglang.flags import LaunchPlan


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
    launch: LaunchPlan
    server: server.Server | AttachedServer | RoutedServers
    lease: gpus.Lease | None
    facts: ServerFacts
    inventory: gpus.Inventory
    check: preflight.VariantCheck  # the variant's preflight, asked once when it started
    sglang_python: str  # the interpreter of the SGLang release preflight resolved with
    hf_config: dict[str, Any]  # the model's config.json, parsed once when it started
    verdicts: list[Verdict] = field(default_factory=list)
    server_notes: tuple[str, ...] = ()  # what every measurement on this server should say about it
    decode_log_interval: int | None = None  # as launched; None: the release's default, or not ours to set
    server_metrics_off: str | None = None  # why /metrics is not read; None: it is read

    @property
    def key(self) -> tuple[str, str]:
        return (deployment_key(self.deployment), self.variant.id)

    @property
    def attached(self) -> bool:
        return isinstance(self.server, AttachedServer) or (
            isinstance(self.server, RoutedServers) and self.server.attached
        )

    @property
    def predicted_model(self) -> ModelFacts | None:
        """The model SGLang's own classes built in preflight, where it could build them."""
        return self.check.resolution.model if self.check.resolution else None
