"""The GPU probe against the real nvidia-ml-py binding, its functions replaced by a fake NVML
(`sglperf.testing.fake_nvml`): sampling, throttling, foreign processes, unsupported readings and an
NVML that cannot be used at all (the real library, absent on a machine without a GPU)."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Iterator

import psutil
import pynvml
import pytest

from sglperf.model.gpu_telemetry import GpuLimits, GpuRound
from sglperf.runtime import gpus
from sglperf.runtime.gpu_telemetry import NAMESPACE_NOTE, NvmlRoundProbe, NvmlUnusable, open_probe
from sglperf.testing.fake_nvml import MIB, FakeGpu, FakeNvml

INTERVAL_S = 0.02
HW_THERMAL = pynvml.nvmlClocksEventReasonHwThermalSlowdown
UNSEEN_PID = 4_000_000  # above the default pid_max: NVML listing a host pid from inside a container


@pytest.fixture
def gpu() -> FakeGpu:
    return FakeGpu()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, gpu: FakeGpu) -> FakeNvml:
    return FakeNvml([gpu, FakeGpu(name="NVIDIA L40S", sm_clock_max_mhz=2520)]).patch(monkeypatch)


@pytest.fixture
def probe(fake: FakeNvml, gpu: FakeGpu) -> Iterator[NvmlRoundProbe]:
    opened = open_probe([gpu.uuid], INTERVAL_S)
    yield opened
    opened.close()
    assert fake.init_count == 0  # NVML shut down again


def sampled(probe: NvmlRoundProbe, seconds: float = 0.12) -> GpuRound:
    probe.start()
    time.sleep(seconds)
    return probe.stop()


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sglperf-gpu-telemetry"]


def test_a_steady_gpu_is_sampled_through_the_round_and_not_disturbed(probe: NvmlRoundProbe, fake: FakeNvml) -> None:
    r = sampled(probe)
    assert not sampler_threads()
    assert r.note is None and r.disturbance(GpuLimits()) is None
    (one,) = r.gpus  # only the GPU asked for
    assert (one.index, one.name) == (0, "NVIDIA RTX A6000")
    assert one.samples > 1 and fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] >= one.samples
    assert (one.sm_clock_mhz, one.sm_clock_max_mhz, one.mem_clock_mhz) == (1800, 2100, 8001)
    assert (one.power_w, one.power_limit_w, one.temperature_c) == (250, 300, 70)
    assert one.throttled == {} and one.throttle_share() == 0 and one.foreign == ()


def test_a_gpu_that_throttles_during_the_round_disturbs_it_and_the_next_round_starts_afresh(
    probe: NvmlRoundProbe, gpu: FakeGpu
) -> None:
    probe.start()
    time.sleep(0.1)
    gpu.reasons, gpu.temperature_c, gpu.sm_clock_mhz = HW_THERMAL, 88, 1410
    time.sleep(0.1)
    r = probe.stop()
    (one,) = r.gpus
    assert 0.1 < one.throttle_share() <= 1.0 and set(one.throttled) == {"hw thermal slowdown"}
    line = r.disturbance(GpuLimits())
    assert line is not None and line.startswith("GPU 0 NVIDIA RTX A6000: hw thermal slowdown ")
    assert "88 °C" in line and "of 2100 MHz" in line and "\n" not in line
    assert r.disturbance(GpuLimits(max_throttle=1.0)) is None
    assert not probe.quiet()

    gpu.reasons = 0
    assert probe.quiet()
    again = sampled(probe, 0.06)
    assert again.disturbance(GpuLimits()) is None and again.gpus[0].temperature_c == 88


def test_the_old_name_of_the_throttle_reasons_is_used_where_the_new_one_is_missing(
    probe: NvmlRoundProbe, fake: FakeNvml, gpu: FakeGpu
) -> None:
    fake.fail("nvmlDeviceGetCurrentClocksEventReasons", pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND))
    gpu.reasons = pynvml.nvmlClocksThrottleReasonSwPowerCap
    r = sampled(probe, 0.06)
    assert r.gpus[0].throttled == {"sw power cap": 1.0} and r.note is None
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1  # tried once, then the old name
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] >= 2


def test_a_foreign_process_on_the_gpu_is_named(probe: NvmlRoundProbe, gpu: FakeGpu) -> None:
    assert os.getpid() != 1 and psutil.pid_exists(1)  # pid 1 is not ours
    gpu.processes = [(1, 600 * MIB)]
    r = sampled(probe, 0.06)
    assert r.note is None
    line = r.disturbance(GpuLimits())
    name = psutil.Process(1).name()
    assert line == f"foreign process on the GPU: pid 1 {name} (600 MiB) on GPU 0"
    assert r.disturbance(GpuLimits(ignore_processes=(name,))) is None
    assert not probe.quiet() and probe.quiet(GpuLimits(ignore_processes=(name,)))


def test_a_foreign_graphics_process_that_comes_and_goes_is_caught_at_the_end(
    probe: NvmlRoundProbe, gpu: FakeGpu
) -> None:
    probe.start()
    time.sleep(0.05)
    gpu.graphics_processes = [(1, None)]
    r = probe.stop()
    assert [(p.pid, p.used_mib) for p in r.gpus[0].foreign] == [(1, None)]


def test_pids_from_another_pid_namespace_are_not_told_apart(probe: NvmlRoundProbe, gpu: FakeGpu) -> None:
    assert not psutil.pid_exists(UNSEEN_PID)
    gpu.processes = [(UNSEEN_PID, 20_000 * MIB)]
    r = sampled(probe, 0.06)
    assert r.note == NAMESPACE_NOTE and r.gpus[0].foreign == ()
    assert r.disturbance(GpuLimits()) is None and probe.quiet()


def test_an_unsupported_power_reading_is_unknown_not_fatal(probe: NvmlRoundProbe, fake: FakeNvml) -> None:
    fake.fail("nvmlDeviceGetPowerUsage")
    r = sampled(probe, 0.06)
    (one,) = r.gpus
    assert math.isnan(one.power_w) and one.power_limit_w == 300 and one.samples > 1
    assert one.temperature_c == 70 and r.note is None
    assert "power not reported" in one.describe()


def test_checks_nvml_cannot_do_and_other_failures_are_noted_on_the_round(probe: NvmlRoundProbe, fake: FakeNvml) -> None:
    fake.fail("nvmlDeviceGetCurrentClocksEventReasons")
    fake.fail("nvmlDeviceGetCurrentClocksThrottleReasons")
    fake.fail("nvmlDeviceGetTemperature", pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST))
    fake.fail("nvmlDeviceGetGraphicsRunningProcesses", pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION))
    r = sampled(probe, 0.06)
    assert r.note is not None and "\n" not in r.note
    assert "GPU 0: temperature not read (GPU is lost)" in r.note
    assert "GPU 0: clock-event reasons not read (Not Supported): throttling not checked" in r.note
    assert "GPU 0: graphics processes not listed (Insufficient Permissions): foreign processes not checked" in r.note
    assert math.isnan(r.gpus[0].temperature_c) and r.gpus[0].sm_clock_mhz == 1800


def test_an_unexpected_error_in_the_thread_becomes_a_note_not_a_lost_traceback(
    probe: NvmlRoundProbe, fake: FakeNvml
) -> None:
    fake.fail("nvmlDeviceGetClockInfo", RuntimeError("boom"))
    r = sampled(probe, 0.06)
    assert not sampler_threads()
    assert r.note is not None and "GPU sampling stopped early: RuntimeError: boom" in r.note


def test_close_ends_a_running_round_and_shuts_nvml_down_once(fake: FakeNvml) -> None:
    probe = open_probe(None, INTERVAL_S)
    assert len(sampled(probe, 0.03).gpus) == 2
    probe.start()
    probe.close()
    probe.close()
    assert not sampler_threads() and fake.init_count == 0 and fake.calls["nvmlShutdown"] == 1
    with pytest.raises(RuntimeError, match="after close"):
        probe.start()


def test_an_unknown_uuid_is_one_line_and_nvml_is_shut_down(fake: FakeNvml) -> None:
    with pytest.raises(NvmlUnusable, match=r"NVML has no GPU GPU-nope \(it has GPU-0") as caught:
        open_probe(["GPU-nope"])
    assert "\n" not in str(caught.value) and fake.init_count == 0


def test_an_nvml_that_does_not_initialise_is_one_line(fake: FakeNvml) -> None:
    fake.fail("nvmlInit", pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    with pytest.raises(NvmlUnusable, match=r"NVML did not initialise: Driver Not Loaded$"):
        open_probe(None)


def test_without_the_binding_the_probe_is_unusable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlUnusable, match=r"nvidia-ml-py \(pynvml\) is not installed"):
        open_probe(None)


def test_the_real_nvml_without_a_gpu_is_one_line() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML")
    with pytest.raises(NvmlUnusable) as caught:
        open_probe(None)
    message = str(caught.value)
    assert "\n" not in message and "NVML Shared Library Not Found" in message, message


def test_the_gpu_inventory_and_teardown_work_on_the_fake(
    fake: FakeNvml, gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(gpus.SIMULATED_ENV, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    inventory = gpus.visible_gpus()
    assert inventory.source == "nvml"
    assert [(g.index, g.name, g.uuid) for g in inventory.gpus] == [
        (0, gpu.name, gpu.uuid),
        (1, "NVIDIA L40S", fake.gpus[1].uuid),
    ]
    assert inventory.gpus[0].memory_gib == pytest.approx(48, abs=0.1)
    gpu.processes = [(4242, 3 * 1024**3)]
    assert gpus.gpu_memory_used_by([4242], [0, 1]) == {0: 3.0, 1: 0.0}
    gpu.processes = []
    assert gpus.wait_gpu_memory_released([4242], [0], deadline_s=1).released
    assert fake.init_count == 0


def test_the_fake_returns_the_bindings_types_and_puts_the_real_functions_back() -> None:
    real = pynvml.nvmlDeviceGetName
    with FakeNvml([FakeGpu(processes=[(7, None)])]) as fake:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(fake.gpus[0].uuid)
        assert isinstance(pynvml.nvmlDeviceGetMemoryInfo(handle), pynvml.c_nvmlMemory_t)
        (proc,) = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        assert isinstance(proc, pynvml.nvmlFriendlyObject) and (proc.pid, proc.usedGpuMemory) == (7, None)
        assert isinstance(pynvml.nvmlDeviceGetName(handle), str)
        pynvml.nvmlShutdown()
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetName(handle)
    assert pynvml.nvmlDeviceGetName is real
