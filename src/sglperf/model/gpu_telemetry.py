"""What the GPUs did while a round was measured: their clocks, power, temperature, and who else was on them.

A GPU that runs below its clocks makes SGLang look slow for reasons SGLang is not to blame for: a
warm room or a clogged fan (thermal slowdown), a power limit set by an administrator or a tired
power supply (power cap, power brake), a desktop session or a stray job from another user sharing
the GPU. Each of these reads as a regression when it happens in a candidate's run and not in its
baseline's. So a round is measured only while sglperf also samples NVML on the GPUs the server
was given (`sglperf.runtime.gpu_telemetry`):

* clock-event ("throttle") reasons, as the share of a round's samples in which one was active.
  Only the reasons that slow a GPU down for outside causes count: thermal (``THERMAL_REASONS``)
  and power (``POWER_REASONS``). "sw power cap" counts too: a GPU held at its power limit runs
  below its clocks, and a limit lowered since the baseline is exactly what must not be blamed on
  SGLang; users whose GPUs sit at their cap by design raise ``max_gpu_throttle`` (1.0 turns the
  check off). Idle, application clocks, sync boost and display clocks are left out: they are the
  GPU's normal life, not a disturbance.
* foreign processes: processes NVML lists on those GPUs that are neither this test process nor one
  of its descendants (the server sglperf launched and its workers are ours), minus the names the
  user says to ignore (a display server that holds a few MiB, say).

A round with a throttle share above the limit, or with a foreign process, is *disturbed*: the
meter drops it and measures it again.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator

THERMAL_REASONS: dict[int, str] = {
    0x20: "sw thermal slowdown",
    0x40: "hw thermal slowdown",
    0x08: "hw slowdown",  # thermal or power-supply trouble as the board sees it: both outside SGLang
}
POWER_REASONS: dict[int, str] = {
    0x04: "sw power cap",
    0x80: "hw power brake",
}
COUNTED_REASONS: dict[int, str] = {**THERMAL_REASONS, **POWER_REASONS}
COUNTED_MASK = sum(COUNTED_REASONS)
DEFAULT_MAX_GPU_THROTTLE = 0.10  # share of a round's samples with a thermal/power reason active


def _null_is_nan(value: Any) -> Any:
    return math.nan if value is None else value


# A reading NVML may not report (NaN), written to JSON as null (`model.files.strict_json`) and read back.
Reading = Annotated[float, BeforeValidator(_null_is_nan)]


def _known(values: Iterable[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def _median(values: Iterable[float]) -> float:
    known = _known(values)
    return statistics.median(known) if known else math.nan


def _max(values: Iterable[float]) -> float:
    return max(_known(values), default=math.nan)


def _min(values: Iterable[float]) -> float:
    return min(_known(values), default=math.nan)


def _temperature_phrase(celsius: float, prefix: str = "") -> str:
    return "temperature not reported" if math.isnan(celsius) else f"{prefix}{celsius:.0f} °C"


def _clock_phrase(mhz: float, max_mhz: float) -> str:
    if math.isnan(mhz):
        return "SM clock not reported"
    return f"SM {mhz:.0f} MHz" if math.isnan(max_mhz) else f"SM {mhz:.0f} of {max_mhz:.0f} MHz"


def _power_phrase(watts: float, limit_w: float, prefix: str = "") -> str:
    if math.isnan(watts):
        return "power not reported"
    if math.isnan(limit_w):
        return f"{prefix}{watts:.0f} W (limit not reported)"
    return f"{prefix}{watts:.0f} of {limit_w:.0f} W"


@dataclass(frozen=True)
class GpuProcess:
    """A process NVML listed on a GPU."""

    pid: int
    name: str  # "" when unknown
    used_mib: float | None  # None: NVML could not tell

    def describe(self) -> str:
        memory = f"{self.used_mib:.0f} MiB" if self.used_mib is not None else "memory unknown"
        return f"pid {self.pid}{' ' + self.name if self.name else ''} ({memory})"


@dataclass(frozen=True)
class GpuSampleSummary:
    """One GPU over one round. NaN: NVML did not report that reading (unsupported on this card)."""

    index: int  # NVML index
    name: str
    samples: int
    sm_clock_mhz: float  # median over the samples
    sm_clock_max_mhz: float
    mem_clock_mhz: float  # median
    power_w: float  # max over the samples
    power_limit_w: float  # enforced limit
    temperature_c: float  # max
    throttled: dict[str, float]  # counted reason -> share of samples it was active (only those > 0)
    foreign: tuple[GpuProcess, ...]  # seen on this GPU during the round, not ours
    # Share of samples with ANY counted reason active: reasons overlap, so it cannot be derived from
    # ``throttled``. None: take the largest single share (a lower bound, for hand-made summaries).
    throttle_share_value: float | None = None

    def throttle_share(self) -> float:
        """Share of the round's samples with a thermal or power reason active."""
        if self.throttle_share_value is not None:
            return self.throttle_share_value
        return max(self.throttled.values(), default=0.0)

    def _throttle_phrase(self, allowed: float | None = None) -> str:
        if not self.throttled:
            return "not throttled"
        worst = sorted(self.throttled.items(), key=lambda item: (-item[1], item[0]))
        if len(worst) == 1:
            phrase = f"{worst[0][0]} {worst[0][1]:.0%} of the round"
        else:
            each = ", ".join(f"{name} {share:.0%}" for name, share in worst)
            phrase = f"throttled {self.throttle_share():.0%} of the round ({each})"
        return phrase if allowed is None else f"{phrase} (allowed: {allowed:.0%})"

    def _describe(self, allowed: float | None = None) -> str:
        parts = [
            self._throttle_phrase(allowed),
            _temperature_phrase(self.temperature_c),
            _clock_phrase(self.sm_clock_mhz, self.sm_clock_max_mhz),
            _power_phrase(self.power_w, self.power_limit_w),
        ]
        return f"GPU {self.index} {self.name or '(name unknown)'}: " + ", ".join(parts)

    def describe(self) -> str:
        """E.g. "GPU 0 NVIDIA RTX A6000: hw thermal slowdown 63% of the round, 86 °C, SM 1410 of 2100 MHz,
        298 of 300 W"."""
        return self._describe()


@dataclass(frozen=True)
class GpuLimits:
    """When a round counts as disturbed."""

    max_throttle: float = DEFAULT_MAX_GPU_THROTTLE  # 1.0 turns the throttle check off
    foreign_processes: bool = True  # drop rounds with a foreign process on the GPU
    ignore_processes: tuple[str, ...] = ()  # process names never counted as foreign (e.g. "Xorg")

    def counts_as_foreign(self, process: GpuProcess) -> bool:
        ignored = {name.casefold() for name in self.ignore_processes}
        return self.foreign_processes and not (process.name and process.name.casefold() in ignored)


@dataclass(frozen=True)
class GpuRound:
    """All the server's GPUs over one round."""

    gpus: tuple[GpuSampleSummary, ...]
    note: str | None = None  # what could not be checked this round, and why

    def foreign(self, limits: GpuLimits) -> list[tuple[int, GpuProcess]]:
        """(GPU index, process) for every foreign process ``limits`` counts."""
        return [(gpu.index, p) for gpu in self.gpus for p in gpu.foreign if limits.counts_as_foreign(p)]

    def throttle_share(self) -> float:
        """The largest throttle share among the GPUs (0 without GPUs)."""
        return max((gpu.throttle_share() for gpu in self.gpus), default=0.0)

    def disturbance(self, limits: GpuLimits) -> str | None:
        """None when the round may be kept, else one line saying why not."""
        reasons: list[str] = []
        throttled = sorted(
            (gpu for gpu in self.gpus if gpu.throttle_share() > limits.max_throttle),
            key=lambda gpu: (-gpu.throttle_share(), gpu.index),
        )
        if throttled:
            line = throttled[0]._describe(allowed=limits.max_throttle)
            if len(throttled) > 1:
                line += f"; also GPU {','.join(str(gpu.index) for gpu in throttled[1:])}"
            reasons.append(line)
        foreign = self.foreign(limits)
        if foreign:
            listed = ", ".join(f"{p.describe()} on GPU {index}" for index, p in foreign)
            reasons.append(f"foreign process{'es' if len(foreign) > 1 else ''} on the GPU: {listed}")
        return "; ".join(reasons) or None

    def severity(self, limits: GpuLimits) -> tuple[float, int]:
        """For picking the worst of several disturbed rounds: throttle share, then foreign processes."""
        return self.throttle_share(), len(self.foreign(limits))


@dataclass(frozen=True)
class GpuTelemetrySummary:
    """The GPUs over one measurement: measured rounds, and rounds dropped because a GPU was disturbed.

    Over several GPUs each round counts its slowest: the lowest median SM clock (and the lowest
    maximum clock and enforced power limit), the highest temperature, power and throttle share; a
    tensor-parallel server runs at the pace of its slowest GPU. NaN: not reported by NVML.
    """

    limits_max_throttle: float
    rounds: int  # measured (kept) rounds
    sm_clock_mhz: Reading  # median over kept rounds of the slowest GPU's median
    sm_clock_max_mhz: Reading  # lowest over the GPUs
    temperature_c: Reading  # max over kept rounds and GPUs
    power_w: Reading  # max
    power_limit_w: Reading  # lowest enforced limit
    throttle_share: Reading  # max over kept rounds and GPUs
    dropped_rounds: int
    worst_dropped: str = ""  # GpuRound.disturbance() of the worst dropped round

    @classmethod
    def of(
        cls, limits: GpuLimits, kept: Sequence[GpuRound], dropped: Sequence[tuple[GpuRound, str]]
    ) -> GpuTelemetrySummary | None:
        """None when no round was sampled at all. ``dropped``: each round with its disturbance line."""
        if not kept and not dropped:
            return None
        gpus = [gpu for r in kept for gpu in r.gpus]
        worst = max(dropped, key=lambda item: item[0].severity(limits))[1] if dropped else ""
        return cls(
            limits_max_throttle=limits.max_throttle,
            rounds=len(kept),
            sm_clock_mhz=_median(_min(gpu.sm_clock_mhz for gpu in r.gpus) for r in kept),
            sm_clock_max_mhz=_min(gpu.sm_clock_max_mhz for gpu in gpus),
            temperature_c=_max(gpu.temperature_c for gpu in gpus),
            power_w=_max(gpu.power_w for gpu in gpus),
            power_limit_w=_min(gpu.power_limit_w for gpu in gpus),
            throttle_share=max((gpu.throttle_share() for gpu in gpus), default=math.nan),
            dropped_rounds=len(dropped),
            worst_dropped=worst,
        )

    def note(self) -> str | None:
        """A line for the record's notes when rounds were dropped."""
        if not self.dropped_rounds:
            return None
        return (
            f"{self.dropped_rounds} round(s) dropped and measured again: the GPU was disturbed "
            f"(worst: {self.worst_dropped})"
        )

    def describe(self) -> str:
        """One line for the report: clocks, temperature, power against its limit, throttle share."""
        parts = [
            _clock_phrase(self.sm_clock_mhz, self.sm_clock_max_mhz),
            _temperature_phrase(self.temperature_c, "up to "),
            _power_phrase(self.power_w, self.power_limit_w, "up to "),
        ]
        if not math.isnan(self.throttle_share):
            parts.append(
                f"throttled at most {self.throttle_share:.0%} of a round (allowed: {self.limits_max_throttle:.0%})"
            )
        return f"GPU over {self.rounds} round(s): " + ", ".join(parts)
