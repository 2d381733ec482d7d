"""Which processes count as foreign around a round, with real processes: our own children never do, on
the host's CPUs (Linux's real counters) or on a GPU (a fake NVML); a busy process that is not ours does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from sglperf.model.gpu_telemetry import GpuLimits
from sglperf.runtime import host_probe
from sglperf.runtime.gpu_telemetry import open_probe
from sglperf.testing.fake_nvml import MIB, FakeGpu, FakeNvml
from sglperf.testing.neighbours import foreign_spinners

from ..support.quiet_host import cpu_of_others, used_between

linux_only = pytest.mark.skipif(host_probe.available() is not None, reason=str(host_probe.available()))


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.fixture
def foreign_spinner() -> Iterator[psutil.Process]:
    with foreign_spinners(1) as (spinner,):
        yield spinner


@linux_only
def test_our_own_work_and_our_childrens_is_not_foreign() -> None:
    # Other processes may run meanwhile (an xdist sibling, say): foreign is compared with what they
    # used, so the test holds on a busy box too; 0.4 s covers others reaped by no process we can read.
    # Counting our 1.2 CPU-seconds would break it.
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        probe = host_probe.HostProbe()
        others_before = cpu_of_others()
        started = time.perf_counter()
        probe.start()
        _spin(0.6)
        load = probe.stop()
        window_s = time.perf_counter() - started
        others = used_between(others_before, cpu_of_others())
    finally:
        child.kill()
        child.wait()
    assert load.foreign_cpu_s <= others + load.slack_cpu_s + 0.4, (load, others)
    assert 0.6 <= load.wall_s <= window_s and load.cpus == psutil.cpu_count()


@linux_only
def test_a_busy_process_that_is_not_ours_is_foreign_and_named(foreign_spinner: psutil.Process) -> None:
    probe = host_probe.HostProbe()
    spun_before = sum(foreign_spinner.cpu_times()[:2])
    probe.start()
    time.sleep(0.8)
    load = probe.stop()
    spun = sum(foreign_spinner.cpu_times()[:2]) - spun_before
    if spun <= 0.4:  # it needs a CPU for most of the window; an overcommitted host gave it less
        pytest.skip(f"not judged: the spinner had {spun:.2f} s of CPU in 0.8 s (the host is overcommitted)")
    assert load.foreign_cpu_s >= spun - load.slack_cpu_s, (load, spun)
    assert load.disturbed(limit=0.5 * spun / load.capacity_cpu_s)
    assert f"pid {foreign_spinner.pid}" in probe.busiest_others(interval_s=0.3)


def test_our_own_child_on_the_gpu_is_not_foreign(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = FakeGpu()
    fake = FakeNvml([gpu]).patch(monkeypatch)
    probe = open_probe([gpu.uuid], 0.02)
    child = subprocess.Popen(["sleep", "5"])
    try:
        gpu.processes = [(child.pid, 20_000 * MIB), (os.getpid(), 300 * MIB)]
        probe.start()
        time.sleep(0.06)
        r = probe.stop()
        assert probe.quiet()
    finally:
        child.kill()
        child.wait()
        probe.close()
    assert fake.init_count == 0  # NVML shut down again
    assert r.note is None and r.gpus[0].foreign == () and r.disturbance(GpuLimits()) is None
