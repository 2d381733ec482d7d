"""GPU inventory from an nvidia-smi program, and the allocator across competing processes (simulated
GPUs; no GPU needed)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, TypedDict

import pytest

from sglperf.runtime import gpus
from sglperf.runtime.gpus import (
    GPU,
    GpuAllocator,
    Inventory,
    visible_gpus,
)


def _fake_nvidia_smi(bin_dir: Path, body: str) -> None:
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def test_nvidia_smi_fallback_and_cuda_visible_devices(no_gpu_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvidia_smi(
        no_gpu_env,
        textwrap.dedent("""\
        echo "0, NVIDIA RTX A6000, 49140, GPU-aaaa-0000"
        echo "1, NVIDIA RTX A6000, 49140, GPU-bbbb-1111"
        echo "2, NVIDIA RTX A6000, 49140, GPU-cccc-2222\""""),
    )
    inv = visible_gpus()
    assert inv.source == "nvidia-smi"
    assert inv.gpus[1] == GPU(1, "NVIDIA RTX A6000", 49140 / 1024, "GPU-bbbb-1111")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-aaaa")  # indices and uuid prefixes mix
    assert visible_gpus().indices == (2, 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,MIG-xyz,0")  # CUDA stops at what it cannot resolve
    assert visible_gpus().indices == (1,)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == Inventory((), "nvidia-smi")


def test_failing_nvidia_smi_is_no_gpus(no_gpu_env: Path) -> None:
    _fake_nvidia_smi(no_gpu_env, "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    assert visible_gpus() == Inventory((), "none")


# --- the allocator, across processes -------------------------------------------------------------

# Waits for a start signal so every worker competes at once, holds a lease ~0.5 s, reports its interval.
WORKER = textwrap.dedent("""\
    import json, os, sys, time
    from pathlib import Path
    from sglperf.runtime.gpus import GpuAllocator
    barrier = Path(sys.argv[1])
    (barrier / f"ready-{os.getpid()}").touch()
    while not (barrier / "go").exists():
        time.sleep(0.005)
    lease = GpuAllocator().acquire(2, timeout_s=20)
    start = time.time()
    time.sleep(0.5)
    end = time.time()
    lease.release()
    print(json.dumps({"pid": os.getpid(), "gpus": list(lease.indices), "start": start, "end": end}))
""")


HOLDER = textwrap.dedent("""\
    import time
    from sglperf.runtime.gpus import GpuAllocator
    lease = GpuAllocator().acquire(2, timeout_s=10)
    print(lease.cuda_visible_devices, flush=True)
    time.sleep(60)
""")


class Held(TypedDict):
    """What a WORKER prints: its pid, the GPUs it held, and when (time.time())."""

    pid: int
    gpus: list[int]
    start: float
    end: float


class Spawn(Protocol):
    def __call__(self, code: str, simulated: str, *args: str) -> subprocess.Popen[str]: ...


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    """Start Python children with simulated GPUs and a private lock dir; none outlives the test."""
    children: list[subprocess.Popen[str]] = []

    def start(code: str, simulated: str, *args: str) -> subprocess.Popen[str]:
        env = {**os.environ, gpus.SIMULATED_ENV: simulated, gpus.LOCK_DIR_ENV: str(tmp_path / "locks")}
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        children.append(proc)
        return proc

    yield start
    for proc in children:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _compete(spawn: Spawn, tmp_path: Path, simulated: str, workers: int) -> list[Held]:
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [spawn(WORKER, simulated, str(barrier)) for _ in range(workers)]
    deadline = time.monotonic() + 60
    while len(list(barrier.glob("ready-*"))) < workers:
        assert time.monotonic() < deadline, "workers did not start"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.01)
    (barrier / "go").touch()
    records: list[Held] = []
    for proc in procs:
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        records.append(json.loads(out))
    # The invariant: two holders whose intervals overlap never share a GPU.
    for a in records:
        for b in records:
            if a is not b and set(a["gpus"]) & set(b["gpus"]):
                assert a["end"] <= b["start"] or b["end"] <= a["start"], (a, b)
    return records


def test_eight_gpus_serve_four_pairs_at_once(spawn: Spawn, tmp_path: Path) -> None:
    records = _compete(spawn, tmp_path, "8xNVIDIA RTX A6000:48", workers=4)
    assert sorted(r["gpus"] for r in records) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert max(r["start"] for r in records) < min(r["end"] for r in records)  # all four held at once


def test_two_gpus_serve_one_pair_at_a_time(spawn: Spawn, tmp_path: Path) -> None:
    records = sorted(_compete(spawn, tmp_path, "2xNVIDIA RTX A6000:48", workers=4), key=lambda r: r["start"])
    assert all(r["gpus"] == [0, 1] for r in records)
    assert all(prev["end"] <= nxt["start"] for prev, nxt in itertools.pairwise(records))
    assert records[-1]["end"] - records[0]["start"] >= 4 * 0.5


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_killed_holder_frees_its_gpus(spawn: Spawn, tmp_path: Path) -> None:
    holder = spawn(HOLDER, "2xNVIDIA RTX A6000:48")
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "0,1", holder.stderr.read() if holder.stderr else ""
    alloc = GpuAllocator(range(2), tmp_path / "locks", poll_s=0.02)
    with pytest.raises(TimeoutError, match=f"GPU 0 by pid {holder.pid} for \\d+ s; GPU 1 by pid {holder.pid}"):
        alloc.acquire(1, timeout_s=0)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    with alloc.acquire(2, timeout_s=2) as lease:
        assert lease.indices == (0, 1)
