"""Measurement records: provenance, per-metric comparisons, and what one measurement item reports.

`MeasurementRecord` is what `<results>/measurements/<key>.json` holds (plus the meter's raw
per-request record under "result", which sglperf writes for people and tools but never reads back).
"""

from __future__ import annotations

import datetime as _dt
from enum import Enum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from sglperf.model.batch_evidence import BatchEvidence
from sglperf.model.files import SAFE_NAME_PATTERN
from sglperf.model.gpu_telemetry import GpuTelemetrySummary
from sglperf.model.host_load import HostLoadSummary
from sglperf.model.metrics import MetricOutcome
from sglperf.model.numbers_source import NumbersSource
from sglperf.model.server_metrics import ServerMetricsRecord
from sglperf.model.variant_effect import ExpectedEffect
from sglperf.model.workload import LoadPoint, RoundPlan


def _utc_time(text: str | None) -> str | None:
    """An ISO 8601 time in UTC; one without an offset is UTC (as the history import reads run stamps)."""
    if text is None:
        return None
    moment = _dt.datetime.fromisoformat(text)  # ValueError: not a time (pydantic names the field)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return moment.astimezone(_dt.UTC).isoformat()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Provenance(_Strict):
    """Where and with what a measurement ran: every field can explain a change."""

    sglang_version: str
    torch_version: str = "unknown"
    cuda_version: str = "unknown"
    driver_version: str = "unknown"
    gpu_names: tuple[str, ...] = ()
    gpu_count: int = 0
    runner: str
    emulated: bool = False  # recorded against the emulator: never comparable with GPU numbers
    harness_version: str = "unknown"
    git_commit: str = "unknown"
    date: str
    effective_args_digest: str
    # The effective args themselves, flattened (cuda_graph_config.decode.max_bs), without what differs
    # between two launches: a baseline's note names the fields that changed. None: recorded before
    # sglperf kept them (the digest alone says that something changed).
    effective_args: dict[str, Any] | None = None
    launch_command: str
    dummy_weights: bool = False
    kv_pool_tokens: int | None = None  # the KV cache pool SGLang sized at start; None: not served
    # The GPUs' enforced power limit and top SM clock (NVML, lowest over the server's GPUs): an
    # administrator's `nvidia-smi -pl` since the baseline explains a change. None: not read.
    # SGLang's --enable-metrics, as the server's args say. Left out of the args digest (the suite turns it
    # on), but not free: on the CPU server it cost 3-5.5% decode tok/s (bench/enable_metrics_cost.py).
    # None: recorded before sglperf kept it, when it was off.
    server_metrics: bool | None = None
    gpu_power_limit_w: float | None = None
    gpu_sm_clock_max_mhz: float | None = None

    @property
    def numbers_source(self) -> NumbersSource:
        return NumbersSource.of(emulated=self.emulated, gpu_count=self.gpu_count)


class SampleSummary(_Strict):
    n: int
    median: float
    p10: float
    p90: float


class BaselineStatus(str, Enum):
    """What happened with a measurement's baseline."""

    COMPARED = "compared"
    MISSING = "missing"
    MISMATCH = "mismatch"  # another runner profile, GPU model or count, or emulator vs GPU
    UNREADABLE = "unreadable"
    RECORDED = "recorded"
    REFUSED = "refused"  # --update-baselines for a variant whose effective args are wrong


class MetricComparison(BaseModel):
    """One metric against its baseline, as written to results (`baselines.stats.Comparison` in short)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    metric: str
    baseline_median: float
    current_median: float
    change: float  # relative, positive is better
    threshold: float
    p_value: float
    outcome: MetricOutcome
    message: str
    n_baseline: int
    n_current: int


class Roofline(_Strict):
    """Decode tok/s against the memory-bandwidth limit (`sglperf.baselines.roofline` has the formula)."""

    gpu: str
    bandwidth_gbs: float
    bandwidth_source: str
    weight_bytes_per_gpu: int
    weight_source: str
    tokens_per_step: float
    tokens_per_step_source: str
    limit_tok_s: float
    measured_tok_s: float
    fraction: float
    # Set when ``fraction`` is above what any GPU can reach (`roofline.IMPOSSIBLE_ABOVE`): says the
    # inputs or the measurement are wrong and names the inputs; the fraction is then no hardware
    # figure. None: plausible, or a record written before the check.
    problem: str | None = None


class Rounds(_Strict):
    """How many rounds a measurement used, and why it stopped there."""

    used: int
    budget: int  # the workload's repeats
    sequential: bool  # a sequential plan decided when to stop
    reason: str = ""


# Names that become file names (plots, reports) when a results folder is read back: a downloaded
# folder must not be able to write elsewhere.
SafeName = Annotated[str, Field(pattern=SAFE_NAME_PATTERN, max_length=255)]


class MeasurementRecord(BaseModel):
    """One (variant, workload, load): samples, summaries, baseline verdict and provenance."""

    model_config = ConfigDict(extra="ignore")

    key: SafeName
    run_id: SafeName | None = None  # the run that wrote it (None: written before run ids)
    deployment: SafeName
    variant: SafeName
    workload: SafeName
    concurrency: int  # open loop: the most in flight
    rate: float | None = None  # open loop: requests per second
    # What every round sent: how many requests, over how many prompts (more requests: the prompts were cycled),
    # at most how many in flight. None: written before sglperf kept it (a closed loop then sent each prompt once).
    sends: RoundPlan | None = None
    emulated: bool
    sglang_version: str
    provenance: Provenance
    samples: dict[str, list[float]]  # metric -> one value per round
    summary: dict[str, SampleSummary]
    baseline: str  # the baseline file's path
    baseline_status: BaselineStatus = BaselineStatus.COMPARED
    baseline_samples: dict[str, list[float]] = Field(default_factory=dict)
    comparisons: list[MetricComparison] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)  # why the item fails, one line each
    changes: list[str] = Field(default_factory=list)  # what a baseline refresh changed
    rounds: Rounds | None = None  # None in records written before sequential stopping
    roofline: Roofline | None = None
    roofline_note: str | None = None  # why there is no roofline
    host: HostLoadSummary | None = None  # None where it was not counted (host_note says why)
    host_note: str | None = None
    gpu: GpuTelemetrySummary | None = None  # None where it was not read (gpu_note says why; CPU runners: no GPU)
    gpu_note: str | None = None
    batches: BatchEvidence | None = None  # what the server's batch log lines say the rounds ran
    server_metrics: ServerMetricsRecord | None = None  # the server's /metrics per measured round
    server_metrics_note: str | None = None  # why they are missing or stopped
    skip_reason: str | None = Field(default=None, exclude=True)  # the item skips (policy "skip")
    # For variant effects (`sglperf.baselines.variant_effects`), so a results folder alone can say them:
    started_at: Annotated[str | None, AfterValidator(_utc_time)] = None  # ISO UTC, when the first round began
    reference_variant: str | None = None  # the deployment's variant every other is held against
    floors: dict[str, float] = Field(default_factory=dict)  # the workload's regression floors per metric
    expected_effects: dict[str, ExpectedEffect] = Field(default_factory=dict)  # the variant's, for this workload

    @property
    def load(self) -> LoadPoint:
        return LoadPoint(self.concurrency, self.rate)

    @property
    def medians(self) -> dict[str, float]:
        return {metric: s.median for metric, s in self.summary.items()}

    @property
    def numbers_source(self) -> NumbersSource:
        """Either flag says emulator: a record whose two flags disagree is never shown as a GPU's."""
        return NumbersSource.of(emulated=self.emulated or self.provenance.emulated, gpu_count=self.provenance.gpu_count)

    @property
    def outcomes(self) -> dict[str, MetricOutcome]:
        return {c.metric: c.outcome for c in self.comparisons}

    def row(self) -> MeasurementRow:
        return MeasurementRow(
            key=self.key,
            emulated=self.emulated,
            status=self.baseline_status,
            medians=self.medians,
            outcomes=self.outcomes,
            changes=self.changes,
            rounds=self.rounds.used if self.rounds else None,
            rounds_budget=self.rounds.budget if self.rounds else None,
            host_share=self.host.median_share if self.host else None,
            dropped_rounds=self.host.dropped_rounds if self.host else 0,
            gpu_dropped_rounds=self.gpu.dropped_rounds if self.gpu else 0,
        )


class MeasurementRow(BaseModel):
    """A measurement in short, for the run's terminal summary (travels from xdist workers as JSON)."""

    model_config = ConfigDict(frozen=True)

    key: str
    emulated: bool
    status: BaselineStatus
    medians: dict[str, float]
    outcomes: dict[str, MetricOutcome]
    changes: list[str]
    rounds: int | None = None
    rounds_budget: int | None = None
    host_share: float | None = None  # median share of the machine's CPU others took during the rounds
    dropped_rounds: int = 0  # rounds run again because the host was busy
    gpu_dropped_rounds: int = 0  # rounds run again because a GPU throttled or ran another process
