"""Deployment files (`deployments/<key>.toml`): what runs where, which flag combinations, what to expect.

Validated strictly: an unknown key, a wrong type or an unknown intent is an error that names the
file, the field and what is allowed.
"""

from __future__ import annotations

import itertools
import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from sglperf.errors import SglperfError
from sglperf.model.files import SAFE_NAME_PATTERN, os_problem, read_input
from sglperf.model.intent_names import INTENT_NAMES, SPECULATIVE
from sglperf.model.metrics import METRICS, with_inherited_floors
from sglperf.model.prompts import PromptError, load_prompts
from sglperf.model.variant_effect import ExpectedEffect

SLUG_PATTERN = SAFE_NAME_PATTERN
Slug = Annotated[str, Field(pattern=SLUG_PATTERN, max_length=64)]
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
ENV_VALUE_PATTERN = r"^[^\x00]*$"
# Environment for the server: names a process environment can hold, values without NUL (the kernel
# would refuse them at launch, under SGLang's name).
EnvVars = dict[
    Annotated[str, Field(pattern=ENV_NAME_PATTERN, max_length=256)],
    Annotated[str, Field(pattern=ENV_VALUE_PATTERN, max_length=65536)],
]
# A deadline sglperf promises to keep: finite, at most a week.
Deadline = Annotated[float, Field(gt=0, le=7 * 86400, allow_inf_nan=False)]
PATTERN_MEANING = {
    SLUG_PATTERN: "letters, digits, '.', '_' and '-' only (it becomes part of test ids and paths)",
    ENV_NAME_PATTERN: "an environment variable name (letters, digits and '_', not starting with a digit)",
    ENV_VALUE_PATTERN: "a value without NUL characters",
    r"^\d{1,2}\.\d$": "a compute capability such as '8.6'",
}


class DeploymentError(SglperfError, ValueError):
    """A deployment file is unreadable or invalid; the message names file and field."""


class _Strict(BaseModel):
    # strict: `tp_size = "2"` or `reuse_prefix_cache = 1` is an error, not a silent conversion (a TOML
    # integer is still a valid float: `startup_timeout_s = 1800`). Paths are written as strings.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


FilePath = Annotated[Path, Field(strict=False)]


class Model(_Strict):
    key: Slug
    served_path: str = Field(description="checkpoint path on GPU runners (override: --model-path)")
    config: FilePath = Field(description="config.json used by preflight, relative to the deployment file")


def _check_thresholds(value: dict[str, float]) -> dict[str, float]:
    for metric, threshold in value.items():
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; allowed: {', '.join(sorted(METRICS))}")
        limit = METRICS[metric].direction.threshold_limit
        if not 0 < threshold < limit:
            raise ValueError(
                f"threshold for {metric} must be a fraction between 0 and 1, e.g. 0.03"
                if limit == 1
                else f"threshold for {metric} must be above 0, e.g. 0.03 (+3%) or 2.0 (three times the baseline)"
            )
    return value


GPU_PROFILE_FIELDS = ("gpu_count", "gpu_name", "compute_capability", "memory_gib")
# What serves SGLang's kernel ops on a CPU runner: SGLang's CPU kernel package (built for AVX-512; the
# intel_amx path, the CPU graph and speculative decoding), or none at all, so that SGLang takes its own
# torch_native fallbacks (any x86-64 CPU). sglperf.sglang.cpu_envs builds the environment for each.
CpuKernel = Literal["sgl-kernel", "torch-native"]


GPU_MEASUREMENT_FIELDS = ("sm_count", "max_gpu_throttle", "gpu_ignore_processes")  # GPU runners only
# Runner fields about measuring, not about what preflight simulates: kept out of the probe profile, so
# tuning them leaves cached resolutions valid.
MEASUREMENT_ONLY_FIELDS = frozenset(
    {"memory_bandwidth_gbs", "max_host_load", "thresholds", "max_gpu_throttle", "gpu_ignore_processes", "gpu_telemetry"}
)


class RunnerProfile(_Strict):
    """The machine a deployment runs on: its GPUs (``device = "cuda"``, the default), or no GPU at all
    (``device = "cpu"``: a real SGLang server on this CPU, ``--device cpu``; no GPU field is allowed)."""

    name: Slug
    device: Literal["cuda", "cpu"] = "cuda"
    gpu_count: int = Field(default=0, ge=0, le=64)
    gpu_name: str = ""
    compute_capability: str | None = Field(default=None, pattern=r"^\d{1,2}\.\d$")
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
    # CPU runners only; None means "sgl-kernel" (kept out of the probe profile, so older caches stay valid).
    cpu_kernel: CpuKernel | None = None

    @field_validator("thresholds")
    @classmethod
    def _known_metrics(cls, value: dict[str, float]) -> dict[str, float]:
        return _check_thresholds(value)

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


class DraftModel(_Strict):
    """A separate draft model (EAGLE, EAGLE3, a small standalone model): where the runner keeps it, and
    its config.json here, which preflight reads (as it reads the target's ``model.config``)."""

    served_path: str = Field(description="the draft checkpoint on GPU runners (may name ${ENV} variables)")
    config: FilePath = Field(description="the draft's config.json used by preflight, relative to the deployment file")


class Speculative(_Strict):
    algorithm: str = Field(min_length=1)
    num_steps: int = Field(ge=1)
    num_draft_tokens: int = Field(ge=1)
    eagle_topk: int = Field(default=1, ge=1)
    draft_model: DraftModel | None = None  # None: the target carries its own (MTP/NEXTN)


class SpeculativeOverride(_Strict):
    algorithm: str | None = None
    num_steps: int | None = Field(default=None, ge=1)
    num_draft_tokens: int | None = Field(default=None, ge=1)
    eagle_topk: int | None = Field(default=None, ge=1)
    draft_model: DraftModel | None = None


def _check_intents(value: dict[str, Any]) -> dict[str, Any]:
    for name in value:
        if name not in INTENT_NAMES:
            raise ValueError(f"unknown intent {name!r}; allowed: {', '.join(sorted(INTENT_NAMES))}")
        if name == SPECULATIVE:
            raise ValueError(f"{name!r} is set through [launch.speculative] or a variant's speculative table")
    return value


class VersionRule(_Strict):
    """Flags and environment that only some SGLang releases need (their spelling changes)."""

    sglang: str = Field(description="PEP 440 version specifier, e.g. '<0.5.20'")
    flags: list[str] = Field(default_factory=list)
    env: EnvVars = Field(default_factory=dict)
    reason: str = ""

    @field_validator("sglang")
    @classmethod
    def _specifier(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            raise ValueError(f"{value!r} is not a version specifier such as '<0.5.20' or '>=0.5.14,<0.5.20'") from None
        return value


class Launch(_Strict):
    tp_size: int = Field(ge=1)
    speculative: Speculative | None = None
    extra_flags: list[str] = Field(default_factory=list)
    env: EnvVars = Field(default_factory=dict)
    when: list[VersionRule] = Field(default_factory=list)
    startup_timeout_s: Deadline = 1800
    # --enable-metrics on every launch, so each round's server metrics are read; false leaves it to the flags.
    server_metrics: bool = True


class Variant(_Strict):
    id: Slug
    description: str = ""
    flags: list[str] = Field(default_factory=list, description="raw SGLang flags, checked against the installed parser")
    request: dict[str, StrictBool] = Field(default_factory=dict, description="intents the suite translates to flags")
    expect: dict[str, StrictBool] = Field(default_factory=dict, description="intents checked in the effective args")
    speculative: SpeculativeOverride | None = None
    env: EnvVars = Field(default_factory=dict)
    # The effect this variant exists for, held against the deployment's reference variant in the same run
    # (`sglperf.baselines.variant_effects`): workload id -> metric -> "lower", "higher" or "none" (nothing
    # beyond the floor). Not detected at the test's level, it fails that workload's effect item.
    expect_effect: dict[Slug, dict[str, ExpectedEffect]] = Field(default_factory=dict)

    @field_validator("expect_effect")
    @classmethod
    def _effect_metrics_known(cls, value: dict[str, dict[str, ExpectedEffect]]) -> dict[str, dict[str, ExpectedEffect]]:
        for workload, metrics in value.items():
            unknown = sorted(set(metrics) - set(METRICS))
            if unknown:
                raise ValueError(
                    f"{workload}: unknown metric(s) {', '.join(unknown)}; known: {', '.join(sorted(METRICS))}"
                )
        return value

    @field_validator("request", "expect")
    @classmethod
    def _intents_known(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_intents(value)


class Slo(_Strict):
    """Targets a request must meet, every one of them, to count toward goodput (per-request TTFT, its
    ITL over the decode window, its end-to-end time; `sglperf.measure.samples`)."""

    ttft_s: Deadline | None = None
    itl_s: Deadline | None = None
    e2e_s: Deadline | None = None

    @model_validator(mode="after")
    def _some_target(self) -> Slo:
        if self.ttft_s is None and self.itl_s is None and self.e2e_s is None:
            raise ValueError("an slo needs at least one of ttft_s, itl_s, e2e_s")
        return self

    def describe(self) -> str:
        return ", ".join(
            f"{name} <= {value:g}"
            for name, value in (("ttft_s", self.ttft_s), ("itl_s", self.itl_s), ("e2e_s", self.e2e_s))
            if value is not None
        )


# The fewest rounds at which the capacity's sign test can say "meets" or "misses" at all
# (`sglperf.baselines.capacity`: seven rounds on one side of the target, p = 1/128 < 0.01).
CAPACITY_MIN_ROUNDS = 7


class Capacity(_Strict):
    """A search for the highest of these rates at which the workload keeps its SLO (`sglperf.baselines.capacity`)."""

    rates: list[Annotated[float, Field(gt=0, le=10_000)]] = Field(
        min_length=2, description="requests per second, measured lowest first; the search stops at the first missed"
    )
    goodput: float = Field(
        default=0.9, gt=0, le=1, description="the goodput share a round must keep for its rate to meet the SLO"
    )

    @field_validator("rates")
    @classmethod
    def _ascending(cls, value: list[float]) -> list[float]:
        if any(b <= a for a, b in itertools.pairwise(value)):
            raise ValueError(f"capacity rates must rise, each once (got {value})")
        return value


@dataclass(frozen=True)
class LoadPoint:
    """One load a workload is measured at: ``concurrency`` requests in flight (closed loop), or requests
    sent at ``rate`` per second whatever the server does (open loop; ``concurrency`` is then the most
    in flight, None for no cap)."""

    concurrency: int | None
    rate: float | None = None

    @property
    def tag(self) -> str:
        """In measurement keys, test ids and baseline entry keys: c8, r2.5."""
        return f"r{self.rate:g}" if self.rate is not None else f"c{self.concurrency}"

    def describe(self) -> str:
        if self.rate is None:
            return f"concurrency {self.concurrency}"
        return f"{self.rate:g} req/s" + (f", at most {self.concurrency} in flight" if self.concurrency else "")


# Fields that only an open-loop (rate) workload reads.
OPEN_LOOP_FIELDS = ("arrival", "burstiness", "seed", "requests", "duration_s", "max_concurrency")

# Synthetic prompt sets (sglperf.measure.synthetic) are read back as prompt files, which are read up to
# 64 MiB (model.files.INPUT_LIMIT_BYTES): a token takes at most ~16 bytes of JSON, usually far fewer.
MAX_PROMPT_TOKENS = 1_048_576
MAX_SYNTHETIC_PROMPTS = 100_000
MAX_SYNTHETIC_TOKENS = 4_000_000
Seed = Annotated[int, Field(ge=0, le=2**63 - 1, description="the generator's seed: the same seed, the same prompts")]


class RandomPrompts(_Strict):
    """``count`` prompts of random tokens, each of a length drawn uniformly from
    [input_len * (1 - input_range), input_len * (1 + input_range)] tokens of the server's tokenizer."""

    kind: Literal["random"]
    count: int = Field(ge=1, le=MAX_SYNTHETIC_PROMPTS, description="how many prompts")
    input_len: int = Field(ge=1, le=MAX_PROMPT_TOKENS, description="prompt length in tokens (the middle of the range)")
    input_range: float = Field(
        default=0.0, ge=0, lt=1, allow_inf_nan=False, description="relative spread of the lengths: 0.25 is +-25%"
    )
    seed: Seed = 0

    @field_validator("input_range")
    @classmethod
    def _one_zero(cls, value: float) -> float:
        return value + 0.0  # -0.0 is 0.0: one spelling, so one cache key (sglperf.measure.synthetic)

    @model_validator(mode="after")
    def _bounded(self) -> RandomPrompts:
        _, high = self.length_range()
        if high > MAX_PROMPT_TOKENS:
            raise ValueError(
                f"input_len: {self.input_len} x (1 + input_range {self.input_range:g}) reaches {high} tokens, over "
                f"{MAX_PROMPT_TOKENS}; lower input_len or input_range"
            )
        if self.count * high > MAX_SYNTHETIC_TOKENS:
            raise ValueError(
                f"count: {self.count} prompts of up to {high} tokens exceed {MAX_SYNTHETIC_TOKENS} tokens in all; "
                "lower count or input_len"
            )
        return self

    def length_range(self) -> tuple[int, int]:
        """The fewest and most tokens a prompt may have (both included)."""
        spread = self.input_len * self.input_range
        return max(1, math.floor(self.input_len - spread)), math.ceil(self.input_len + spread)

    def prompt_count(self) -> int:
        return self.count

    def describe(self) -> str:
        spread = f"±{self.input_range * 100:g}%" if self.input_range else ""
        return f"random, {self.input_len}{spread} tokens"


class SharedPrefixPrompts(_Strict):
    """``prefixes`` x ``suffixes`` prompts: each is one of ``prefixes`` shared prefixes of ``prefix_len``
    tokens followed by a suffix of its own of ``input_len`` tokens (the radix cache serves the prefixes)."""

    kind: Literal["shared-prefix"]
    prefixes: int = Field(ge=1, le=10_000, description="how many distinct shared prefixes")
    suffixes: int = Field(ge=1, le=MAX_SYNTHETIC_PROMPTS, description="prompts per prefix, each with its own suffix")
    prefix_len: int = Field(ge=1, le=MAX_PROMPT_TOKENS, description="shared prefix length in tokens")
    input_len: int = Field(ge=1, le=MAX_PROMPT_TOKENS, description="each prompt's own suffix length in tokens")
    seed: Seed = 0

    @model_validator(mode="after")
    def _bounded(self) -> SharedPrefixPrompts:
        count, length = self.prefixes * self.suffixes, self.prefix_len + self.input_len
        if count > MAX_SYNTHETIC_PROMPTS:
            raise ValueError(
                f"suffixes: {self.prefixes} prefixes x {self.suffixes} suffixes make {count} prompts, over "
                f"{MAX_SYNTHETIC_PROMPTS}; lower prefixes or suffixes"
            )
        if length > MAX_PROMPT_TOKENS:
            raise ValueError(
                f"input_len: prefix_len + input_len is {length} tokens, over {MAX_PROMPT_TOKENS}; lower one of them"
            )
        if count * length > MAX_SYNTHETIC_TOKENS:
            raise ValueError(
                f"suffixes: {count} prompts of {length} tokens exceed {MAX_SYNTHETIC_TOKENS} tokens in all; "
                "lower prefixes, suffixes or the lengths"
            )
        return self

    def prompt_count(self) -> int:
        return self.prefixes * self.suffixes

    def describe(self) -> str:
        return (
            f"shared-prefix, {self.prefixes} prefixes of {self.prefix_len} tokens x {self.suffixes} suffixes of "
            f"{self.input_len} tokens"
        )


# A synthetic prompt set, told apart by its `kind`.
SyntheticPrompts = Annotated[RandomPrompts | SharedPrefixPrompts, Field(discriminator="kind")]


class Workload(_Strict):
    id: Slug
    prompts: FilePath | None = Field(
        default=None, description="JSONL prompt set, relative to the deployment file (or synthetic)"
    )
    synthetic: SyntheticPrompts | None = Field(
        default=None, description="prompts generated in tokens of the server's own tokenizer (or prompts)"
    )
    max_prompts: int | None = Field(default=None, ge=1, description="use only the first N prompts of the set")
    output_len: int = Field(default=256, ge=1)
    concurrency: list[int] = Field(default_factory=lambda: [1])
    rate: float | None = Field(
        default=None, gt=0, le=10_000, description="open loop: requests per second, sent on schedule (not concurrency)"
    )
    arrival: Literal["poisson", "constant"] = Field(default="poisson", description="open loop: the gaps between sends")
    burstiness: float = Field(
        default=1.0, gt=0, le=100, description="open loop, poisson: gamma shape of the gaps (1: Poisson; < 1 burstier)"
    )
    seed: int = Field(default=0, ge=0, description="open loop: the schedule's seed (every round sends on the same one)")
    requests: int | None = Field(
        default=None, ge=1, le=100_000, description="open loop: requests per round (default: one per prompt)"
    )
    duration_s: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="open loop: send for this long per round (every request the schedule puts before it), "
        "instead of a number of requests; the round then waits for the last answer",
    )
    max_concurrency: int | None = Field(default=None, ge=1, description="open loop: the most requests in flight")
    slo: Slo | None = Field(default=None, description="targets for goodput: the share of requests meeting them all")
    capacity: Capacity | None = Field(
        default=None, description="open loop at each of these rates instead of one: the highest that keeps the slo"
    )
    warmup: int = Field(default=2, ge=0)
    repeats: int = Field(
        default=12, ge=1, description="rounds over the prompt set; each round is one sample (the most a run measures)"
    )
    sequential: bool = Field(
        default=True, description="stop measuring once the verdict against the baseline is clear (baselines.sequential)"
    )
    min_repeats: int = Field(default=3, ge=2, description="rounds a sequential run measures at least")
    api: Literal["native", "openai-chat", "openai-completions"] = "native"
    reuse_prefix_cache: bool = False
    stall_timeout_s: Deadline = Field(default=60.0, description="silence between two chunks that counts as a stall")
    thresholds: dict[str, float] = Field(default_factory=dict, description="relative regression floors per metric")

    @model_validator(mode="after")
    def _one_prompt_set(self) -> Workload:
        if self.prompts is not None and self.synthetic is not None:
            raise ValueError("synthetic: a workload has one prompt set: remove prompts (a file) or synthetic")
        if self.prompts is None and self.synthetic is None:
            raise ValueError(
                'prompts: a workload needs a prompt set: prompts = "FILE.jsonl" or synthetic = { kind = "random", '
                "count = 32, input_len = 512 } (docs/deployments.md)"
            )
        return self

    @model_validator(mode="after")
    def _rounds(self) -> Workload:
        # The default min_repeats yields to a smaller repeats (such a run simply never stops early).
        if self.sequential and "min_repeats" in self.model_fields_set and self.min_repeats > self.repeats:
            raise ValueError(
                f"min_repeats: {self.min_repeats} exceeds repeats {self.repeats} (repeats is the most rounds a "
                "sequential run measures, min_repeats the fewest); lower min_repeats or set sequential = false"
            )
        return self

    @model_validator(mode="after")
    def _capacity(self) -> Workload:
        if self.capacity is None:
            return self
        if self.slo is None:
            raise ValueError("capacity: a capacity search needs an slo (what a rate must keep); add slo")
        if self.rate is not None:
            raise ValueError("rate, capacity: a capacity search measures each of its rates; remove rate")
        if self.repeats < CAPACITY_MIN_ROUNDS:
            raise ValueError(
                f"repeats: a capacity search needs at least {CAPACITY_MIN_ROUNDS} rounds per rate (fewer can never "
                f"tell meeting the slo from missing it at p < 0.01); got {self.repeats}"
            )
        return self

    @model_validator(mode="after")
    def _one_loop(self) -> Workload:
        if self.rate is not None or self.capacity is not None:
            if "concurrency" in self.model_fields_set:
                raise ValueError(
                    "concurrency: a workload with a rate sends on its schedule, not with a fixed number in flight; "
                    "remove concurrency (max_concurrency caps what is in flight) or remove rate"
                )
            if self.requests is not None and self.duration_s is not None:
                raise ValueError(
                    "requests, duration_s: a round is bounded by a number of requests or by a duration, not both; "
                    "remove one"
                )
            return self
        if stray := [f for f in OPEN_LOOP_FIELDS if f in self.model_fields_set]:
            raise ValueError(
                f"{', '.join(stray)}: only for a workload with a rate (open loop); add rate or remove them"
            )
        return self

    def load_points(self) -> list[LoadPoint]:
        """What the workload is measured at, in order: each concurrency, or its one rate."""
        if self.capacity is not None:
            return [LoadPoint(self.max_concurrency, rate) for rate in self.capacity.rates]
        if self.rate is None:
            return [LoadPoint(c) for c in self.concurrency]
        return [LoadPoint(self.max_concurrency, self.rate)]

    def at(self, load: LoadPoint) -> Workload:
        """The workload as measured at one of its load points: a capacity search's step is an open-loop
        workload at that rate, run for all its rounds (its sign test needs them, not a sequential stop)."""
        if self.capacity is None or load.rate is None:
            return self
        return self.model_copy(update={"rate": load.rate, "sequential": False})

    def schedule(self) -> str:
        """What must match for an open-loop baseline to be comparable: everything that shapes the sends."""
        if self.rate is None:
            return ""
        cap = self.max_concurrency or "none"
        burst = f" burstiness={self.burstiness:g}" if self.arrival == "poisson" else ""
        bound = f"requests={self.requests or 'prompts'}"
        if self.duration_s is not None:
            bound = f"duration={self.duration_s:g}s"
        return f"rate={self.rate:g} {self.arrival}{burst} seed={self.seed} {bound} cap={cap}"

    @field_validator("concurrency")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if not value or any(c < 1 for c in value):
            raise ValueError("concurrency must be a non-empty list of integers >= 1")
        return value

    @field_validator("thresholds")
    @classmethod
    def _known_metrics(cls, value: dict[str, float]) -> dict[str, float]:
        return _check_thresholds(value)


class Deployment(_Strict):
    key: Slug
    path: Path
    description: str = ""
    model: Model
    runner: RunnerProfile
    launch: Launch
    expect: dict[str, StrictBool] = Field(default_factory=dict, description="expectations shared by every variant")
    variants: list[Variant] = Field(min_length=1)
    workloads: list[Workload] = Field(default_factory=list)
    # The variant every other is measured against in the same run (variant effects); default the first.
    reference_variant: Slug | None = None

    @field_validator("expect")
    @classmethod
    def _intents_known(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_intents(value)

    @model_validator(mode="after")
    def _consistent(self) -> Deployment:
        seen: set[str] = set()
        for i, variant in enumerate(self.variants):
            if variant.id in seen:
                raise ValueError(f"variants[{i}].id: duplicate variant id {variant.id!r}")
            seen.add(variant.id)
            if variant.speculative and not self.launch.speculative and not variant.speculative.algorithm:
                raise ValueError(f"variants[{i}].speculative: no algorithm here nor in [launch.speculative]")
            if variant.speculative:
                try:
                    self.speculative_for(variant)
                except ValidationError as exc:
                    problems = "; ".join(
                        f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)
                    )
                    raise ValueError(
                        f"variants[{i}].speculative: merged with [launch.speculative] it is incomplete: {problems}"
                    ) from None
        self._check_effects()
        if self.runner.is_cpu and self.launch.tp_size != 1:
            raise ValueError(f"launch.tp_size: a CPU runner serves with tp_size 1, not {self.launch.tp_size}")
        if not self.runner.is_cpu and self.launch.tp_size > self.runner.gpu_count:
            raise ValueError(f"launch.tp_size: {self.launch.tp_size} exceeds runner.gpu_count {self.runner.gpu_count}")
        return self

    def _check_effects(self) -> None:
        ids = [v.id for v in self.variants]
        if self.reference_variant is not None and self.reference_variant not in ids:
            raise ValueError(f"reference_variant: {self.reference_variant!r} is not a variant ({', '.join(ids)})")
        workloads = {w.id for w in self.workloads}
        for i, variant in enumerate(self.variants):
            if variant.expect_effect and variant.id == self.reference:
                raise ValueError(
                    f"variants[{i}].expect_effect: {variant.id!r} is the reference variant, which nothing is held "
                    "against; set reference_variant to the variant it should beat"
                )
            for workload in variant.expect_effect:
                if workload not in workloads:
                    known = ", ".join(sorted(workloads)) or "none"
                    raise ValueError(f"variants[{i}].expect_effect.{workload}: no such workload (workloads: {known})")

    @property
    def reference(self) -> str:
        """The variant the others' effects are measured against."""
        return self.reference_variant or self.variants[0].id

    @property
    def config_path(self) -> Path:
        return (self.path.parent / self.model.config).resolve()

    @property
    def architectures(self) -> tuple[str, ...]:
        return tuple(self.hf_config().get("architectures", []))

    def hf_config(self) -> dict[str, Any]:
        """The model's config.json (checked readable and an object when the deployment was loaded)."""
        data: dict[str, Any] = json.loads(self.config_path.read_text())
        return data

    def with_launch_env(self, env: dict[str, str]) -> Deployment:
        """The same deployment with ``env`` over its launch environment (benches compare settings)."""
        launch = self.launch.model_copy(update={"env": {**self.launch.env, **env}})
        return self.model_copy(update={"launch": launch})

    def without_launch_flag(self, flag: str) -> Deployment:
        """The same deployment without ``flag`` and its value in ``launch.extra_flags`` (benches and tests
        compare settings); KeyError if the deployment does not pass it."""
        flags = list(self.launch.extra_flags)
        if flag not in flags:
            raise KeyError(f"{self.path}: launch.extra_flags has no {flag}")
        at = flags.index(flag)
        del flags[at : at + 2]
        return self.model_copy(update={"launch": self.launch.model_copy(update={"extra_flags": flags})})

    def variant(self, variant_id: str) -> Variant:
        for v in self.variants:
            if v.id == variant_id:
                return v
        raise KeyError(f"{self.path}: no variant {variant_id!r}; have {[v.id for v in self.variants]}")

    def speculative_for(self, variant: Variant) -> Speculative | None:
        base = self.launch.speculative
        if variant.speculative is None:
            return base
        override = variant.speculative.model_dump(exclude_none=True)
        merged = {**(base.model_dump() if base else {}), **override}
        return Speculative(**merged)

    def largest_in_flight(self) -> int | None:
        """The most requests any workload keeps in flight at any of its load points (a closed loop's
        concurrency, an open loop's max_concurrency); None when no workload bounds it."""
        return max(
            (load.concurrency for w in self.workloads for load in w.load_points() if load.concurrency is not None),
            default=None,
        )

    def thresholds_for(self, workload: Workload) -> dict[str, float]:
        """Regression floors for a workload: its own over the runner's (the defaults fill the rest); a part
        of a metric takes the whole's floor unless set (verify steps/s that of decode tok/s)."""
        return with_inherited_floors({**self.runner.thresholds, **workload.thresholds})

    def expectations_for(self, variant: Variant) -> dict[str, Any]:
        """Every intent this variant is checked on: shared, then variant, then what it requests."""
        expected: dict[str, Any] = {**self.expect, **variant.expect, **variant.request}
        spec = self.speculative_for(variant)
        if spec is not None:
            expected[SPECULATIVE] = spec
        return expected


def _field_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


_STRICT_TYPES = ("int_type", "float_type", "bool_type")


def _describe(error: ErrorDetails, raw: dict[str, Any]) -> str:
    loc = tuple(error["loc"])
    where = _field_path(loc)
    if error["type"] == "extra_forbidden":
        return f"{where}: unknown field"
    if error["type"] == "missing":
        return f"{where}: required field is missing"
    if error["type"] == "string_pattern_mismatch":
        pattern = error.get("ctx", {}).get("pattern", "")
        return f"{where}: {error['input']!r} is not allowed; expected {PATTERN_MEANING.get(pattern, pattern)}"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] in _STRICT_TYPES and isinstance(error["input"], str):
        message += f", got the string {error['input']!r}: write it without quotes"
    elif error["type"] == "string_type" and isinstance(error["input"], (int, float)):
        message += f', got the number {error["input"]!r}: write it in quotes, "{error["input"]}"'
    # Name variants by id as well as by index: people edit by id.
    if loc[:1] == ("variants",) and len(loc) > 1 and isinstance(loc[1], int):
        try:
            message += f" (variant {raw['variants'][loc[1]]['id']!r})"
        except (KeyError, IndexError, TypeError):
            pass
    return f"{where}: {message}"


def _read_text(path: Path, where: str = "", missing: str = "does not exist") -> str:
    """A file's text, or DeploymentError naming it (`where`: the deployment file and field that name it)."""

    def error(problem: str) -> DeploymentError:
        return DeploymentError(f"{where}: {path}: {problem}" if where else f"{path}: {problem}")

    try:
        return read_input(path).decode("utf-8")
    except FileNotFoundError:
        raise error(missing) from None
    except IsADirectoryError:
        raise error("is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None
    except OSError as exc:  # permissions, a device or FIFO, an over-long path, ...
        raise error(f"cannot read it: {os_problem(exc)}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise error(f"cannot read it: {exc}") from None


def load(path: str | Path) -> Deployment:
    """Read and validate one deployment file."""
    path = Path(path)
    text = _read_text(path, missing="no such deployment file")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DeploymentError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise DeploymentError(f"{path}: not valid TOML: nested too deeply") from None
    if "path" in raw:  # set by sglperf from where the file is, never by the file
        raise DeploymentError(f"{path}: invalid deployment file:\n  - path: unknown field")
    raw.setdefault("key", path.stem)
    if raw["key"] != path.stem:
        raise DeploymentError(f"{path}: key: {raw['key']!r} must match the file name {path.stem!r}")
    try:
        deployment = Deployment.model_validate({**raw, "path": path})
    except ValidationError as exc:
        problems = "\n".join(f"  - {_describe(e, raw)}" for e in exc.errors(include_url=False))
        raise DeploymentError(f"{path}: invalid deployment file:\n{problems}") from None
    _check_files(deployment)
    return deployment


def _check_files(deployment: Deployment) -> None:
    where = f"{deployment.path}: model.config"
    try:
        config = deployment.config_path
    except (OSError, ValueError, RuntimeError) as exc:
        raise DeploymentError(f"{where}: {deployment.model.config} is not a usable path: {exc}") from None
    text = _read_text(
        config, where, missing="does not exist (preflight needs the model's config.json; ship it under models/)"
    )
    _check_config_json(config, text, where)
    drafts: list[tuple[str, Speculative | SpeculativeOverride | None]]
    drafts = [("launch.speculative.draft_model.config", deployment.launch.speculative)]
    drafts += [
        (f"variants[{i}].speculative.draft_model.config", v.speculative) for i, v in enumerate(deployment.variants)
    ]
    for field, speculative in drafts:
        if speculative is None or speculative.draft_model is None:
            continue
        where = f"{deployment.path}: {field}"
        draft = deployment.path.parent / speculative.draft_model.config
        missing = "does not exist (preflight reads the draft's config.json: copy it from the draft checkpoint)"
        _check_config_json(draft, _read_text(draft, where, missing=missing), where)
    for i, workload in enumerate(deployment.workloads):
        if workload.prompts is None:  # synthetic: generated when measured, with the server's tokenizer
            continue
        try:
            prompts = (deployment.path.parent / workload.prompts).resolve()
            found = prompts.is_file()
        except (OSError, ValueError, RuntimeError):
            prompts, found = deployment.path.parent / workload.prompts, False
        if not found:
            raise DeploymentError(f"{deployment.path}: workloads[{i}].prompts: {prompts} does not exist")
        # Read now, not when the first measurement starts on a GPU runner: a malformed line is one error
        # at load, naming the workload, the file and the line (format: docs/deployments.md#prompt-sets).
        try:
            load_prompts(prompts)
        except PromptError as exc:
            raise DeploymentError(f"{deployment.path}: workloads[{i}].prompts: {exc}") from None


def parse_hf_config(text: str | bytes) -> dict[str, Any]:
    """A model's config.json as preflight needs it: a JSON object naming its architectures; ValueError
    says which of the two it is not."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("architectures"), list) or not data["architectures"]:
        raise ValueError("has no 'architectures' list")
    return data


def _check_config_json(config: Path, text: str, where: str) -> None:
    try:
        parse_hf_config(text)
    except ValueError as exc:
        raise DeploymentError(f"{where}: {config} {exc}") from None


def discover(paths: list[str | Path]) -> list[Deployment]:
    """Load deployment files and directories of them (``*.toml``), sorted by key."""
    files: list[Path] = []
    for p in map(Path, paths):
        try:
            folder = p.is_dir()
        except OSError:  # an over-long name, say: load() says so, naming it
            folder = False
        files.extend(sorted(p.glob("*.toml")) if folder else [p])
    if not files:
        raise DeploymentError(f"no deployment files found in {', '.join(map(str, paths))}")
    return sorted((load(f) for f in files), key=lambda d: d.key)
