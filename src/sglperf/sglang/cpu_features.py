"""This CPU's features and what they allow: its flags, which of the project's CPU kinds it is, and
whether SGLang's CPU kernel can load on it.

The kernel (``sgl_kernel`` for ``--device cpu``) is compiled for x86-64-v4 (AVX-512); loading it on a
CPU without AVX-512 kills the process with SIGILL, so every caller that could import it (the preflight's
probe, a server start, a CPU environment's build) asks here first. Nothing here builds or imports
anything: the tests' skip lines and ci/cpu-env.sh use it apart from the environments (cpu_envs).

``SGLPERF_CPU_FLAGS`` stands in for /proc/cpuinfo's flags, so that this machine does what a runner of
another kind would (tests/sglang/test_cpu_kinds.py simulates an AVX2 CPU with it).
"""

from __future__ import annotations

import os
from pathlib import Path

from sglperf.model.runner_profile import CpuKernel

# The flags of another CPU kind, instead of /proc/cpuinfo's: what a runner of that kind would do here.
CPU_FLAGS_ENV = "SGLPERF_CPU_FLAGS"
# /proc/cpuinfo flags the CPU kernel needs: it is compiled for x86-64-v4 (AVX-512). Built with -mamx-*
# too, it holds no AMX instruction (oneDNN picks AVX-512 code at run time): it served on an AMD EPYC
# with AVX-512 and no AMX, 2026-12-01, with the CPU shim keeping SGLang on that path (cpu_shim.py).
CPU_KERNEL_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd")
KERNEL_MODULE = "sgl_kernel"


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU feature flags of this machine (the first processor's ``flags`` line; SGLPERF_CPU_FLAGS wins)."""
    if cpuinfo is None:
        simulated = os.environ.get(CPU_FLAGS_ENV)
        if simulated is not None:
            return set(simulated.split())
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags") and ":" in line:
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_kind(flags: set[str] | None = None) -> str:
    """Which of the project's CPU kinds this is, in the words of docs/cpu-tier.md ("Which CPU runs what")."""
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return "a CPU of unknown kind (no /proc/cpuinfo flags)"
    if all(f in flags for f in CPU_KERNEL_FLAGS):
        return "AVX-512 with AMX" if "amx_tile" in flags else "AVX-512 without AMX"
    return "AVX2 without AVX-512" if "avx2" in flags else "no AVX2"


def kernel_flags_missing(cpuinfo: str | None = None) -> str | None:
    """What this CPU lacks of what SGLang's CPU kernel needs ("lacks avx512f, ..."), or None."""
    flags = cpu_flags(cpuinfo)
    missing = [f for f in CPU_KERNEL_FLAGS if f not in flags]
    if not missing:
        return None
    return "no /proc/cpuinfo flags" if not flags else f"lacks {', '.join(missing)}"


def cpu_kernel_problem(cpuinfo: str | None = None) -> str | None:
    """Why SGLang's CPU kernel cannot run on this CPU, or None."""
    missing = kernel_flags_missing(cpuinfo)
    if missing is None:
        return None
    return (
        f"this CPU {missing}: SGLang's CPU kernel (sgl_kernel for --device cpu) is built for AVX-512, so a real "
        'SGLang server with it cannot run here (a runner with cpu_kernel = "torch-native" can)'
    )


def runner_cpu_problem(kernel: CpuKernel) -> str | None:
    """Why a CPU runner with ``kernel`` cannot serve on this CPU, or None."""
    return cpu_kernel_problem() if kernel == "sgl-kernel" else None
