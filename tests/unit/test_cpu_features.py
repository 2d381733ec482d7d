"""`sglperf.sglang.cpu_features`: this CPU's flags and kind, and whether SGLang's CPU kernel can run on it
(from given /proc/cpuinfo text or SGLPERF_CPU_FLAGS; nothing is imported)."""

from __future__ import annotations

import pytest

from sglperf.sglang import cpu_features

ZEN4 = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16\n"
SAPPHIRE_RAPIDS = ZEN4.replace("avx512_bf16", "avx512_bf16 amx_bf16 amx_tile amx_int8")
HASWELL = "flags\t\t: fpu sse avx2 fma\n"


def test_the_cpu_kernel_needs_avx512_not_amx() -> None:
    assert cpu_features.cpu_kernel_problem(ZEN4) is None
    assert cpu_features.cpu_kernel_problem(SAPPHIRE_RAPIDS) is None
    problem = cpu_features.cpu_kernel_problem(HASWELL)
    assert problem is not None and "lacks avx512f, avx512bw, avx512vl, avx512dq, avx512cd" in problem
    assert "no /proc/cpuinfo flags" in (cpu_features.cpu_kernel_problem("") or "")


@pytest.mark.parametrize(
    ("cpuinfo", "kind"),
    [
        (SAPPHIRE_RAPIDS, "AVX-512 with AMX"),
        (ZEN4, "AVX-512 without AMX"),
        (HASWELL, "AVX2 without AVX-512"),
        ("flags\t\t: fpu sse sse2\n", "no AVX2"),
        ("", "a CPU of unknown kind (no /proc/cpuinfo flags)"),
    ],
)
def test_the_three_cpu_kinds_are_named(cpuinfo: str, kind: str) -> None:
    assert cpu_features.cpu_kind(cpu_features.cpu_flags(cpuinfo)) == kind


def test_simulated_cpu_flags_win_over_proc_cpuinfo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_features.CPU_FLAGS_ENV, "fpu sse avx2 fma")
    assert cpu_features.cpu_flags() == {"fpu", "sse", "avx2", "fma"}
    assert cpu_features.cpu_kind() == "AVX2 without AVX-512"
    assert "lacks avx512f" in (cpu_features.runner_cpu_problem("sgl-kernel") or "")
    assert cpu_features.runner_cpu_problem("torch-native") is None  # no native code: any x86-64 CPU
