"""The runner profile (a deployment's ``[runner]``): the machine a deployment runs on, what preflight simulates
of it, and the floors and limits its measurements keep."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sglperf.model.deployment_fields import COMPUTE_CAPABILITY_PATTERN, Slug, StrictTable, check_thresholds

GPU_PROFILE_FIELDS = ("gpu_count", "gpu_name", "compute_capability", "memory_gib")
# What serves SGLang's kernel ops on a CPU runner: SGLang's CPU kernel package (built for AVX-512; the
# intel_amx path, the CPU graph and speculative decoding), or none at all, so that SGLang takes its own
# torch_native fallbacks (any x86-64 CPU). sglperf.sglang.cpu_envs builds the environment for each.
CpuKernel = Literal["sgl-kernel", "torch-native"]


GPU_MEASUREMENT_FIELDS = ("sm_count", "max_gpu_throttle", "gpu_ignore_processes")  # GPU runners only
# Runner fields about measuring, not about what preflight simulates: kept out of the probe profile, so
# tuning them leaves cached resolutions valid.
MEASUREMENT_ONLY_FIELDS = frozenset(
    {
        "memory_bandwidth_gbs",
        "max_host_load",
        "thresholds",
        "max_gpu_throttle",
        "gpu_ignore_processes",
        "gpu_telemetry",
        "nodes",
        "launcher",
    }
)
# How a deployment's servers are started: processes on this machine, or one Slurm job step each in one
# allocation (sglperf.runtime.slurm), torn down as a whole.
Launcher = Literal["local", "slurm"]


class RunnerProfile(StrictTable):
    """The machine a deployment runs on: its GPUs (``device = "cuda"``, the default), or no GPU at all
    (``device = "cpu"``: a real SGLang server on this CPU, ``--device cpu``; no GPU field is allowed)."""

    name: Slug
    device: Literal["cuda", "cpu"] = "cuda"
    gpu_count: int = Field(default=0, ge=0, le=64)
    gpu_name: str = ""
    compute_capability: str | None = Field(default=None, pattern=COMPUTE_CAPABILITY_PATTERN)
    memory_gib: float = Field(default=0.0, ge=0, le=4096)
    sm_count: int | None = Field(default=None, ge=1)
    # Memory bandwidth per GPU (GB/s) for the decode roofline; default: the vendor figure for gpu_name
    # (sglperf.model.hardware). Not part of what preflight simulates.
    memory_bandwidth_gbs: float | None = Field(default=None, gt=0, le=100_000)
    # Share of this machine's CPU other processes may take during a measured round before it is run
    # again (sglperf.model.host_load); default DEFAULT_MAX_HOST_LOAD, --max-host-load overrides.
    max_host_load: float | None = Field(default=None, gt=0, le=1)
    # The GPUs' side of it (sglperf.model.gpu_telemetry): a round during which a GPU ran clock-limited by
    # temperature or power for more than this share of its samples (default DEFAULT_MAX_GPU_THROTTLE; 1
    # never drops; --max-gpu-throttle overrides), or ran a process that is not the server's (unless its
    # name is in gpu_ignore_processes, e.g. a desktop's "Xorg"), is run again. gpu_telemetry = false (or
    # --no-gpu-telemetry) reads no GPU telemetry at all.
    max_gpu_throttle: float | None = Field(default=None, gt=0, le=1)
    gpu_ignore_processes: list[str] = Field(default_factory=list)
    gpu_telemetry: bool = True
    # Regression floors for every workload measured on this runner, its users' own included (a
    # workload's own thresholds win): how far timings move between two unchanged runs is the
    # machine's property, not the workload's.
    thresholds: dict[str, float] = Field(default_factory=dict, description="relative regression floors per metric")
    # Machines in the pool, each with gpu_count GPUs, for a [topology] over several (None: 1).
    nodes: int | None = Field(default=None, ge=1, le=1024)
    launcher: Launcher = "local"
    # CPU runners only; None means "sgl-kernel" (kept out of the probe profile, so older caches stay valid).
    cpu_kernel: CpuKernel | None = None

    @field_validator("thresholds")
    @classmethod
    def _known_metrics(cls, value: dict[str, float]) -> dict[str, float]:
        return check_thresholds(value)

    @field_validator("compute_capability", mode="before")
    @classmethod
    def _capability_as_written(cls, value: Any) -> Any:
        # 8.9 as a TOML number means the version "8.9" (and 9 means "9.0"): read it as a person wrote it.
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 100:
            return f"{float(value):.1f}"
        return value

    @model_validator(mode="before")
    @classmethod
    def _fields_for_device(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("device", "cuda") == "cpu":
            gpu = [f for f in (*GPU_PROFILE_FIELDS, *GPU_MEASUREMENT_FIELDS) if f in data]
            if gpu:
                raise ValueError(f'a CPU runner (device = "cpu") has no GPUs: remove {", ".join(gpu)}')
            return data
        missing = [f for f in GPU_PROFILE_FIELDS if f not in data]
        if missing:
            raise ValueError(
                f"{', '.join(missing)}: required field is missing (a GPU runner needs "
                f'{", ".join(GPU_PROFILE_FIELDS)}; device = "cpu" for a CPU runner)'
            )
        return data

    @model_validator(mode="after")
    def _gpu_values(self) -> RunnerProfile:
        if self.device == "cuda" and self.cpu_kernel is not None:
            raise ValueError('cpu_kernel: only a CPU runner (device = "cpu") has one')
        if self.device == "cuda":
            if self.gpu_count < 1:
                raise ValueError("gpu_count: a GPU runner has at least 1 GPU")
            if not self.gpu_name.strip():
                raise ValueError("gpu_name: must not be empty")
            if self.memory_gib <= 0:
                raise ValueError("memory_gib: must be greater than 0")
        return self

    @property
    def is_cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def kernel(self) -> CpuKernel:
        """What serves SGLang's kernel ops on this CPU runner."""
        return self.cpu_kernel or "sgl-kernel"

    def as_probe_profile(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude=set(MEASUREMENT_ONLY_FIELDS))
