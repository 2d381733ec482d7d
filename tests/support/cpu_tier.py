"""Shared by the tests that need a real SGLang server on this CPU (tests/sglang/test_cpu_server.py,
tests/sglang/test_emulator_contract.py): the SGLang-on-CPU environment, the tiny models, and a way to find
every process a scenario started (children included) after the fact."""

from __future__ import annotations

import functools
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from sglperf.model.deployment_file import load
from sglperf.model.runner_profile import CpuKernel
from sglperf.sglang import cpu_envs, cpu_features, envs
from sglperf.testing import tiny_models

ROOT = Path(__file__).resolve().parents[2]
TINY_CPU = ROOT / "deployments" / "tiny-cpu.toml"
TINY_CPU_MTP = ROOT / "deployments" / "tiny-cpu-mtp.toml"
TINY_CPU_NATIVE = ROOT / "deployments" / "tiny-cpu-native.toml"
SGLANG_VERSION = "0.5.23"  # the release the CPU kernel in ../shared/sglang-cpu is patched for
TINY_MODELS_ENV = tiny_models.TINY_MODELS_ENV
MARKER_ENV = "SGLPERF_TEST_MARKER"


@dataclass(frozen=True)
class CpuServerSetup:
    """What serves on this CPU: SGLang's CPU kernel where the CPU has AVX-512 (tiny-cpu.toml), else no
    native kernel at all (tiny-cpu-native.toml, torch_native attention)."""

    python: str
    models: Path
    deployment: Path

    @property
    def kernel(self) -> CpuKernel:
        return load(self.deployment).runner.kernel

    @property
    def attention_backend(self) -> str:
        """What SGLang resolves on that path (its own fallback rule without the kernel)."""
        return "intel_amx" if self.kernel == "sgl-kernel" else "torch_native"


@functools.cache
def _setup() -> CpuServerSetup | str:
    deployment = TINY_CPU if cpu_features.cpu_kernel_problem() is None else TINY_CPU_NATIVE
    try:
        env = cpu_envs.ensure_cpu_env(
            SGLANG_VERSION, lambda m: print(m, file=sys.stderr), kernel=load(deployment).runner.kernel
        )
    except envs.EnvBuildError as exc:
        return f"no SGLang CPU environment: {exc}"
    models = tiny_models.ensure(str(env.python), tiny_models.default_cache())
    return CpuServerSetup(str(env.python), models, deployment)


def cpu_setup() -> CpuServerSetup:
    """The real CPU server's environment, tiny models and deployment for this CPU, or skip saying why
    this machine cannot (no kernel folder for an AVX-512 CPU, say)."""
    found = _setup()
    if isinstance(found, str):
        pytest.skip(found)
    return found


def restore_env(saved: dict[str, str | None]) -> None:
    """Put back environment variables as ``saved`` had them (None: unset)."""
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def new_marker() -> str:
    return uuid.uuid4().hex


def _pids() -> list[int]:
    return [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and int(e.name) != os.getpid()]


def marked_processes(marker: str, sessions: frozenset[int] = frozenset()) -> list[int]:
    """Every process whose environment carries ``SGLPERF_TEST_MARKER=marker``, or that belongs to one of
    ``sessions``. The server's scheduler and detokenizer rename themselves (setproctitle overwrites
    /proc/PID/environ), so they are found by the session the launcher leads (``server_sessions``)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for pid in _pids():
        try:
            if sessions and os.getsid(pid) in sessions:
                found.append(pid)
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(pid)
    return found


def server_sessions(marker: str) -> frozenset[int]:
    """The sessions led by marked processes: a launched server's (it starts a session of its own)."""
    leaders = set()
    for pid in marked_processes(marker):
        try:
            if os.getsid(pid) == pid:
                leaders.add(pid)
        except OSError:
            continue
    return frozenset(leaders)
