"""The README's commands on each of the project's CPU kinds (AVX-512 with AMX, AVX-512 without, AVX2 only).

This machine's CPU is one of them; the others are simulated with SGLPERF_CPU_FLAGS, which every CPU check
of sglperf reads instead of /proc/cpuinfo. What a CPU without AVX-512 cannot survive, loading SGLang's CPU
kernel, is made real here: an ``sgl_kernel`` placed first on PYTHONPATH kills whoever imports it with
SIGILL, as the AVX-512 build does on an AVX2 CPU. So a test passes only if nothing imports the kernel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglperf.sglang import cpu_features

from ..support.project import NEW_SGLANG, QWEN36, ROOT, SglangPython

pytestmark = pytest.mark.needs_sglang
SGLPERF = str(Path(sys.executable).with_name("sglperf"))
AVX2_ONLY = "fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx avx2 fma bmi1 bmi2 f16c"
CPU_DEPLOYMENTS = [ROOT / "deployments" / f"{name}.toml" for name in ("tiny-cpu", "tiny-cpu-mtp", "tiny-cpu-native")]


@pytest.fixture
def sigill_kernel(tmp_path: Path) -> Path:
    """A folder for PYTHONPATH whose ``sgl_kernel`` dies by SIGILL on import."""
    package = tmp_path / "sigill" / "sgl_kernel"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGILL)\n")
    return package.parent


def _preflight(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SGLPERF, "preflight", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **env},
        timeout=timeout,
    )


def test_preflight_of_the_cpu_deployments_on_an_avx2_cpu_never_imports_the_kernel(
    tmp_path: Path, sigill_kernel: Path, sglang_python: SglangPython
) -> None:
    env = {
        cpu_features.CPU_FLAGS_ENV: AVX2_ONLY,
        "PYTHONPATH": str(sigill_kernel),
        "SGLPERF_PREFLIGHT_CACHE": str(tmp_path / "cache"),  # a fresh probe, not cached answers
    }
    proc = _preflight(*map(str, CPU_DEPLOYMENTS), "--sglang-python", sglang_python(NEW_SGLANG), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"SGLang {NEW_SGLANG}: 17 passed, 0 failed, 0 inert, 0 errors, 0 unproven" in proc.stdout
    said = proc.stderr.splitlines()
    # One line each, however many deployments and resolvers share the fact.
    assert [ln for ln in said if "CPU runner 'cpu-avx512'" in ln] == [
        "CPU runner 'cpu-avx512': resolved with SGLang's CPU kernel stubbed, not loaded (this CPU lacks avx512f, "
        "avx512bw, avx512vl, avx512dq, avx512cd; the kernel is built for AVX-512): its attention backend is this "
        "CPU's, not the runner's"
    ]
    (stubbed,) = [ln for ln in said if "stubbed, not imported" in ln]
    assert stubbed.startswith("preflight: sgl_kernel stubbed, not imported: this CPU lacks avx512f")


def test_a_probe_killed_by_sigill_says_so_at_once(
    tmp_path: Path, sigill_kernel: Path, sglang_python: SglangPython
) -> None:
    """What an AVX2 user saw before: "died or hung ... (limit 300 s)" and "(no output)"; here on this
    machine's real CPU flags when they have AVX-512 (the probe then imports the kernel), simulated otherwise."""
    env = {
        cpu_features.CPU_FLAGS_ENV: "fpu avx2 avx512f avx512bw avx512vl avx512dq avx512cd",
        "PYTHONPATH": str(sigill_kernel),
        "SGLPERF_PREFLIGHT_CACHE": str(tmp_path / "cache"),
    }
    started = time.monotonic()
    proc = _preflight(str(QWEN36), "--sglang-python", sglang_python(NEW_SGLANG), env=env, timeout=120)
    assert time.monotonic() - started < 60
    assert proc.returncode != 0
    assert (
        "the SGLang probe ended while importing SGLang: killed by SIGILL (Illegal instruction): likely a native "
        "module uses instructions this CPU lacks (a build for AVX-512 on a CPU without it, say); this CPU: "
        "AVX-512 without AMX" in proc.stderr
    ), proc.stderr[-2000:]


def test_the_live_items_of_the_kernel_runner_skip_in_one_line_on_an_avx2_cpu(
    tmp_path: Path, sglang_python: SglangPython
) -> None:
    env = {**os.environ, cpu_features.CPU_FLAGS_ENV: AVX2_ONLY, "SGLPERF_TINY_MODELS": str(tmp_path)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(CPU_DEPLOYMENTS[0]),
            "-m",
            "live",
            "-k",
            "plain",
            f"--sglang-version={NEW_SGLANG}",
            f"--results-dir={tmp_path / 'results'}",
            "-p",
            "no:cacheprovider",
            "-rs",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    skips = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert skips and all(
        "this CPU lacks avx512f, avx512bw, avx512vl, avx512dq, avx512cd: SGLang's CPU kernel" in ln
        and "(CPU runner 'cpu-avx512')" in ln
        for ln in skips
    ), skips
