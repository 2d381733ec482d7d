"""GPU inventory, runner-profile matching, allocation within one process and memory-release checks.

No GPU needed: inventories are simulated and NVML is a stand-in module (nvidia-smi and allocation across
processes: tests/integration/test_gpus_processes.py).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from sglperf.model.runner_profile import RunnerProfile
from sglperf.runtime import gpus
from sglperf.runtime.gpus import (
    GPU,
    GpuAllocator,
    Inventory,
    ReleaseCheck,
    default_lock_dir,
    gpu_memory_used_by,
    match_profile,
    parse_simulated,
    visible_gpus,
    wait_gpu_memory_released,
)

pytestmark = pytest.mark.selftest

A6000 = RunnerProfile(name="2xA6000", gpu_count=2, gpu_name="NVIDIA RTX A6000", compute_capability="8.6", memory_gib=48)


# --- inventory -----------------------------------------------------------------------------------


def test_short_form() -> None:
    inv = parse_simulated("8xNVIDIA RTX A6000:48")
    assert inv.source == "simulated"
    assert inv.indices == tuple(range(8))
    assert {(g.name, g.memory_gib) for g in inv.gpus} == {("NVIDIA RTX A6000", 48.0)}
    assert parse_simulated(" 2 x H100 80GB HBM3 : 79.6 ").gpus[1] == GPU(1, "H100 80GB HBM3", 79.6)


def test_json_form() -> None:
    inv = parse_simulated('[{"name": "NVIDIA A100", "memory_gib": 80}, {"name": "NVIDIA L4", "memory_gib": 22.5}]')
    assert inv.gpus == (GPU(0, "NVIDIA A100", 80.0), GPU(1, "NVIDIA L4", 22.5))


@pytest.mark.parametrize(
    "bad",
    [
        "8 A6000s",
        "8xA6000",
        "xA6000:48",
        "2xA6000:0",
        "[not json",
        '[{"name": "A6000"}]',
        '[{"memory_gib": 48}]',
        '[{"name": "A6000", "memory_gib": "48"}]',
        '[{"name": "A6000", "memory_gib": true}]',
    ],
)
def test_malformed_simulation_names_variable_and_forms(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gpus.SIMULATED_ENV, bad)
    with pytest.raises(ValueError) as err:
        visible_gpus()
    message = str(err.value)
    assert "SGLPERF_SIMULATED_GPUS" in message
    assert "JSON list" in message and "COUNTxNAME:GIB" in message


def test_simulation_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gpus.SIMULATED_ENV, "2xNVIDIA RTX A6000:48")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # describes what the process sees: not applied again
    assert visible_gpus() == Inventory(
        (GPU(0, "NVIDIA RTX A6000", 48.0), GPU(1, "NVIDIA RTX A6000", 48.0)), "simulated"
    )


def test_no_gpus_no_tools(no_gpu_env: Path) -> None:
    assert visible_gpus() == Inventory((), "none")


class FakeNvml:
    """Stands in for nvidia-ml-py: a few devices, and compute processes that can change between polls."""

    def __init__(self, names: list[str], processes: list[list[tuple[int, int | None]]]) -> None:
        self.names = names
        self.processes = processes  # per device: (pid, bytes)
        self.polls = 0
        self.on_poll: Callable[[int], None] = lambda polls: None

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self.names[handle].encode()  # old releases return bytes

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle:04d}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=48 * 1024**3)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        if handle == 0:
            self.polls += 1
            self.on_poll(self.polls)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes[handle]]


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch, no_gpu_env: Path) -> FakeNvml:
    nvml = FakeNvml(["NVIDIA RTX A6000"] * 3, [[(100, 3 * 1024**3), (999, 1024**3)], [(101, 2 * 1024**3)], []])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return nvml


def test_nvml_inventory_honours_cuda_visible_devices(fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> None:
    assert visible_gpus() == Inventory(
        tuple(GPU(i, "NVIDIA RTX A6000", 48.0, f"GPU-{i:04d}") for i in range(3)), "nvml"
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0002,1")
    assert visible_gpus().indices == (2, 1)


def test_memory_used_by_pids(fake_nvml: FakeNvml) -> None:
    assert gpu_memory_used_by([100, 101], [0, 1, 2]) == {0: 3.0, 1: 2.0, 2: 0.0}


def test_wait_for_release(fake_nvml: FakeNvml) -> None:
    def free_on_third_poll(polls: int) -> None:
        if polls == 3:
            fake_nvml.processes = [[(999, 1024**3)], [], []]

    fake_nvml.on_poll = free_on_third_poll
    check = wait_gpu_memory_released([100, 101], [0, 1], deadline_s=5, poll_s=0.01)
    assert check.released and check.checked and fake_nvml.polls == 3


def test_wait_for_release_gives_up(fake_nvml: FakeNvml) -> None:
    check = wait_gpu_memory_released([100], [0, 1], deadline_s=0.1, poll_s=0.02)
    assert (check.released, check.checked) == (False, True)
    assert "100" in check.detail and "3.00 GiB on GPU 0" in check.detail


def test_unknown_amount_counts_as_held(fake_nvml: FakeNvml) -> None:
    fake_nvml.processes[2] = [(100, None)]
    assert not wait_gpu_memory_released([100], [2], deadline_s=0, poll_s=0.01).released


def test_release_not_checkable(no_gpu_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check = wait_gpu_memory_released([1], [0], deadline_s=10)
    assert check == ReleaseCheck(True, False, check.detail) and "not installed" in check.detail
    monkeypatch.setenv(gpus.SIMULATED_ENV, "2xA6000:48")
    check = wait_gpu_memory_released([1], [0], deadline_s=10)
    assert (check.released, check.checked) == (True, False) and "simulated" in check.detail


# --- runner profile ------------------------------------------------------------------------------


def test_profile_matches_despite_spelling() -> None:
    inv = Inventory((GPU(0, "RTX A6000", 47.99), GPU(1, "nvidia rtx  a6000", 47.99)), "nvml")
    assert match_profile(inv, A6000, tp_size=2) == []


def test_profile_mismatches_say_expected_and_found() -> None:
    inv = Inventory((GPU(0, "NVIDIA L40S", 44.5),), "simulated")
    problems = match_profile(inv, A6000, tp_size=2)
    assert problems == [
        "tp_size 2: expected at least 2 GPUs, found 1 (simulated by SGLPERF_SIMULATED_GPUS)",
        "GPU count: expected 2 (runner 2xA6000), found 1 (simulated by SGLPERF_SIMULATED_GPUS)",
        "GPU name: expected 'NVIDIA RTX A6000', found 'NVIDIA L40S' on GPU 0",
        "GPU memory: expected 48 GiB (±5%), found 44.5 GiB on GPU 0",
    ]


def test_memory_outside_tolerance() -> None:
    inv = Inventory((GPU(0, "NVIDIA RTX A6000", 48.0), GPU(1, "NVIDIA RTX A6000", 44.0)), "nvml")
    assert match_profile(inv, A6000, tp_size=2) == ["GPU memory: expected 48 GiB (±5%), found 44 GiB on GPU 1"]
    assert match_profile(Inventory((GPU(0, "NVIDIA RTX A6000", 46.0),) * 2, "nvml"), A6000, 2) == []


def test_no_gpus_at_all() -> None:
    problems = match_profile(Inventory((), "none"), A6000, tp_size=2)
    assert len(problems) == 2 and all("found 0 (no NVML or nvidia-smi here)" in p for p in problems)


# --- allocator, one process ---------------------------------------------------------------------


@pytest.fixture
def alloc8(tmp_path: Path) -> GpuAllocator:
    return GpuAllocator(range(8), tmp_path / "locks", poll_s=0.02)


def test_aligned_sets_first(alloc8: GpuAllocator) -> None:
    assert alloc8.candidate_sets(2)[:4] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert alloc8.candidate_sets(4)[:2] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    leases = [alloc8.acquire(2, timeout_s=0) for _ in range(4)]
    assert [lease.indices for lease in leases] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    for lease in leases:
        lease.release()
    with alloc8.acquire(8, timeout_s=0) as everything:
        assert everything.cuda_visible_devices == "0,1,2,3,4,5,6,7"


def test_sizes(alloc8: GpuAllocator) -> None:
    one, four, two = alloc8.acquire(1, 0), alloc8.acquire(4, 0), alloc8.acquire(2, 0)
    assert (one.indices, four.indices, two.indices) == ((0,), (4, 5, 6, 7), (2, 3))
    assert alloc8.acquire(1, 0).indices == (1,)


def test_all_or_none(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    alloc = GpuAllocator(range(4), locks, poll_s=0.02)
    blocker = GpuAllocator([1], locks).acquire(1, 0)  # GPU 1 busy: {0,1} cannot be had
    pair = alloc.acquire(2, 0)
    assert pair.indices == (2, 3)
    with pytest.raises(TimeoutError):
        alloc.acquire(2, timeout_s=0.1)  # only GPU 0 is free
    with alloc.acquire(1, 0) as last:
        assert last.indices == (0,)  # the failed attempts kept nothing
    pair.release()
    blocker.release()


def test_scattered_free_gpus_still_serve(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    held = GpuAllocator([1, 2], locks).acquire(2, 0)
    assert GpuAllocator(range(4), locks).acquire(2, 0).indices == (0, 3)
    held.release()


def test_release_is_idempotent(alloc8: GpuAllocator) -> None:
    lease = alloc8.acquire(8, 0)
    lease.release()
    lease.release()
    assert lease.released
    with alloc8.acquire(8, 0):
        pass


def test_impossible_sizes(alloc8: GpuAllocator, no_gpu_env: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot lease 9 GPUs: only 8 exist"):
        alloc8.acquire(9, timeout_s=60)
    with pytest.raises(ValueError, match="must be >= 1"):
        alloc8.acquire(0, timeout_s=60)
    with pytest.raises(ValueError, match="only 0 exist here"):
        GpuAllocator(lock_dir=tmp_path).acquire(1, timeout_s=60)  # a machine without GPUs


def test_timeout_names_holder_and_progress_is_rate_limited(alloc8: GpuAllocator) -> None:
    alloc = GpuAllocator(range(8), alloc8.lock_dir, poll_s=0.02, progress_every_s=0.2)
    held = alloc.acquire(8, 0)
    messages: list[str] = []
    started = time.monotonic()
    with pytest.raises(TimeoutError) as err:
        alloc.acquire(2, timeout_s=0.7, progress=messages.append)
    assert 0.7 <= time.monotonic() - started < 2
    expected = rf"no 2 free GPUs among 0,1,2,3,4,5,6,7 after \d+\.\d s; held: GPU 0 by pid {os.getpid()} for \d+ s;"
    assert re.search(expected, str(err.value)), err.value
    assert 2 <= len(messages) <= 5, messages
    assert all(f"pid {os.getpid()}" in m for m in messages)
    held.release()


def test_lock_dir_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(gpus.LOCK_DIR_ENV, str(tmp_path / "shared"))
    assert default_lock_dir() == tmp_path / "shared"
    assert GpuAllocator(range(2)).lock_dir == tmp_path / "shared"
    monkeypatch.delenv(gpus.LOCK_DIR_ENV)
    assert default_lock_dir().name == f"sglperf-gpu-locks-{os.getuid()}"
