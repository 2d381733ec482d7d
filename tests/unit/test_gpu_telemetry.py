"""The disturbed-GPU check's plain data: when a round is disturbed, what its line says, and the summary."""

from __future__ import annotations

import math

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.model.gpu_telemetry import (
    POWER_REASONS,
    THERMAL_REASONS,
    GpuLimits,
    GpuProcess,
    GpuRound,
    GpuSampleSummary,
    GpuTelemetrySummary,
)

REASON_NAMES = sorted({*THERMAL_REASONS.values(), *POWER_REASONS.values()})
PROCESS_NAMES = ["", "Xorg", "python", "gnome-shell"]
shares = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


def gpu(
    index: int = 0,
    throttled: dict[str, float] | None = None,
    foreign: tuple[GpuProcess, ...] = (),
    *,
    share: float | None = None,
    power_w: float = 298.0,
    temperature_c: float = 86.0,
    sm_clock_mhz: float = 1410.0,
) -> GpuSampleSummary:
    return GpuSampleSummary(
        index=index,
        name="NVIDIA RTX A6000",
        samples=20,
        sm_clock_mhz=sm_clock_mhz,
        sm_clock_max_mhz=2100.0,
        mem_clock_mhz=8001.0,
        power_w=power_w,
        power_limit_w=300.0,
        temperature_c=temperature_c,
        throttled=throttled or {},
        foreign=foreign,
        throttle_share_value=share,
    )


@st.composite
def summaries(draw: st.DrawFn, index: int) -> GpuSampleSummary:
    reasons = draw(st.lists(st.sampled_from(REASON_NAMES), unique=True, max_size=3))
    throttled = {name: draw(st.floats(min_value=0.01, max_value=1.0)) for name in reasons}
    # ANY reason is active at least as often as the most frequent one, and at most always.
    share = draw(st.floats(min_value=max(throttled.values(), default=0.0), max_value=1.0))
    foreign = tuple(
        GpuProcess(pid, name, draw(st.none() | st.floats(min_value=0, max_value=1e5)))
        for pid, name in draw(
            st.lists(
                st.tuples(st.integers(1, 10**6), st.sampled_from(PROCESS_NAMES)), max_size=3, unique_by=lambda p: p[0]
            )
        )
    )
    return gpu(index, throttled, foreign, share=share, temperature_c=draw(st.floats(30, 95)))


@st.composite
def rounds(draw: st.DrawFn) -> GpuRound:
    count = draw(st.integers(min_value=0, max_value=4))
    return GpuRound(tuple(draw(summaries(i)) for i in range(count)))


limits = st.builds(
    GpuLimits,
    max_throttle=st.floats(min_value=0.0, max_value=1.0),
    foreign_processes=st.booleans(),
    ignore_processes=st.lists(st.sampled_from([*PROCESS_NAMES[1:], "XORG"]), max_size=2).map(tuple),
)


@given(rounds(), limits)
def test_a_round_is_disturbed_exactly_when_a_gpu_throttles_beyond_the_limit_or_a_foreign_process_counts(
    r: GpuRound, lim: GpuLimits
) -> None:
    ignored = {name.casefold() for name in lim.ignore_processes}
    throttled = any(g.throttle_share() > lim.max_throttle for g in r.gpus)
    foreign = lim.foreign_processes and any(
        p.name.casefold() not in ignored or not p.name for g in r.gpus for p in g.foreign
    )
    line = r.disturbance(lim)
    assert (line is None) == (not throttled and not foreign)
    if line is not None:
        assert "\n" not in line
        if foreign:
            assert "foreign process" in line
        if throttled:
            worst = max(r.gpus, key=lambda g: g.throttle_share())
            assert f"GPU {worst.index} " in line


@given(rounds())
def test_a_max_throttle_of_one_turns_the_throttle_check_off(r: GpuRound) -> None:
    assert r.disturbance(GpuLimits(max_throttle=1.0, foreign_processes=False)) is None


@given(st.lists(rounds(), max_size=5), st.lists(rounds(), max_size=5), limits)
def test_the_summary_counts_kept_and_dropped_rounds_and_keeps_the_worst_line(
    kept: list[GpuRound], dropped: list[GpuRound], lim: GpuLimits
) -> None:
    lines = [(r, f"line {i}") for i, r in enumerate(dropped)]
    summary = GpuTelemetrySummary.of(lim, kept, lines)
    if not kept and not dropped:
        assert summary is None
        return
    assert summary is not None
    assert (summary.rounds, summary.dropped_rounds) == (len(kept), len(dropped))
    assert summary.limits_max_throttle == lim.max_throttle
    if dropped:
        worst = max(r.severity(lim) for r in dropped)
        assert summary.worst_dropped in {line for r, line in lines if r.severity(lim) == worst}
        assert summary.note() is not None and summary.note().startswith(f"{len(dropped)} round(s) dropped")  # type: ignore[union-attr]
    else:
        assert summary.worst_dropped == "" and summary.note() is None
    kept_gpus = [g for r in kept for g in r.gpus]
    if kept_gpus:
        assert summary.throttle_share == max(g.throttle_share() for g in kept_gpus)
        assert summary.temperature_c == max(g.temperature_c for g in kept_gpus)
    else:
        assert math.isnan(summary.throttle_share) and math.isnan(summary.sm_clock_mhz)
    assert "\n" not in summary.describe()


def test_the_disturbance_line_names_the_reason_share_temperature_clocks_and_power() -> None:
    hot = gpu(0, {"hw thermal slowdown": 0.63}, share=0.63)
    assert hot.describe() == (
        "GPU 0 NVIDIA RTX A6000: hw thermal slowdown 63% of the round, 86 °C, SM 1410 of 2100 MHz, 298 of 300 W"
    )
    assert GpuRound((hot,)).disturbance(GpuLimits()) == (
        "GPU 0 NVIDIA RTX A6000: hw thermal slowdown 63% of the round (allowed: 10%), 86 °C, "
        "SM 1410 of 2100 MHz, 298 of 300 W"
    )
    both = gpu(1, {"sw power cap": 0.3, "hw slowdown": 0.2}, share=0.4)
    assert both.describe().startswith(
        "GPU 1 NVIDIA RTX A6000: throttled 40% of the round (sw power cap 30%, hw slowdown 20%), "
    )
    line = GpuRound((both, hot)).disturbance(GpuLimits())
    assert line is not None and line.startswith("GPU 0 ") and line.endswith("; also GPU 1")


def test_a_share_at_the_limit_is_kept() -> None:
    assert GpuRound((gpu(0, {"sw power cap": 0.1}, share=0.1),)).disturbance(GpuLimits(max_throttle=0.1)) is None


def test_foreign_processes_are_named_unless_ignored_or_not_checked() -> None:
    desktop = GpuProcess(1234, "Xorg", 12.0)
    job = GpuProcess(777, "", None)
    r = GpuRound((gpu(0, foreign=(desktop,)), gpu(1, foreign=(job,))))
    assert r.disturbance(GpuLimits()) == (
        "foreign processes on the GPU: pid 1234 Xorg (12 MiB) on GPU 0, pid 777 (memory unknown) on GPU 1"
    )
    assert r.disturbance(GpuLimits(ignore_processes=("xorg",))) == (
        "foreign process on the GPU: pid 777 (memory unknown) on GPU 1"
    )
    assert r.disturbance(GpuLimits(foreign_processes=False)) is None


def test_an_unreported_reading_is_said_not_guessed() -> None:
    card = gpu(0, power_w=math.nan, temperature_c=math.nan, sm_clock_mhz=math.nan)
    assert card.describe() == (
        "GPU 0 NVIDIA RTX A6000: not throttled, temperature not reported, SM clock not reported, power not reported"
    )


def test_without_the_any_share_the_largest_single_reason_is_the_share() -> None:
    assert gpu(0, {"sw power cap": 0.3, "hw slowdown": 0.2}).throttle_share() == 0.3
    assert gpu(0).throttle_share() == 0.0


def test_summary_over_kept_rounds_takes_the_slowest_gpu_and_says_why_rounds_were_dropped() -> None:
    cool = GpuRound((gpu(0, sm_clock_mhz=1800, temperature_c=70), gpu(1, sm_clock_mhz=1750, temperature_c=72)))
    warm = GpuRound((gpu(0, sm_clock_mhz=1700, temperature_c=75), gpu(1, sm_clock_mhz=1790, temperature_c=71)))
    hot = GpuRound((gpu(0, {"hw thermal slowdown": 0.63}, share=0.63),))
    lim = GpuLimits()
    line = hot.disturbance(lim)
    assert line is not None
    summary = GpuTelemetrySummary.of(lim, [cool, warm, cool], [(hot, line)])
    assert summary is not None
    assert summary.sm_clock_mhz == 1750 and summary.temperature_c == 75 and summary.throttle_share == 0
    assert summary.note() == f"1 round(s) dropped and measured again: the GPU was disturbed (worst: {line})"
    assert summary.describe() == (
        "GPU over 3 round(s): SM 1750 of 2100 MHz, up to 75 °C, up to 298 of 300 W, "
        "throttled at most 0% of a round (allowed: 10%)"
    )
    assert GpuTelemetrySummary.of(lim, [], []) is None


def test_the_summary_survives_a_pydantic_round_trip() -> None:
    summary = GpuTelemetrySummary.of(GpuLimits(), [GpuRound((gpu(0),))], [])
    assert summary is not None
    adapter = pydantic.TypeAdapter(GpuTelemetrySummary)
    assert adapter.validate_python(adapter.dump_python(summary)) == summary
    assert adapter.validate_json(adapter.dump_json(summary)) == summary


@pytest.mark.parametrize("bit", [*THERMAL_REASONS, *POWER_REASONS])
def test_counted_reasons_are_nvmls_thermal_and_power_bits(bit: int) -> None:
    import pynvml

    names = {
        pynvml.nvmlClocksEventReasonSwThermalSlowdown: "sw thermal slowdown",
        pynvml.nvmlClocksEventReasonHwThermalSlowdown: "hw thermal slowdown",
        pynvml.nvmlClocksEventReasonHwSlowdown: "hw slowdown",
        pynvml.nvmlClocksEventReasonSwPowerCap: "sw power cap",
        pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown: "hw power brake",
    }
    assert {**THERMAL_REASONS, **POWER_REASONS}[bit] == names[bit]
