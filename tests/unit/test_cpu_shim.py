"""The CPU shim's hooks, on stand-in modules (the real ones run in the CPU tier's servers)."""

from __future__ import annotations

import sys
import types

import pytest

from sglperf.sglang import cpu_shim


def _common(amx: bool) -> types.ModuleType:
    """A stand-in for SGLang's sglang.srt.utils.common, with the flag it computes at import."""
    module = types.ModuleType("sglang.srt.utils.common")
    vars(module)["is_amx_tile_supported"] = amx
    return module


def test_importing_the_shim_from_sglperf_hooks_nothing() -> None:
    assert not any(isinstance(finder, cpu_shim._AfterImport) for finder in sys.meta_path)


def test_a_cpu_without_amx_is_kept_on_sglangs_amx_path_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SGLPERF_CPU_SHIM_QUIET", raising=False)
    common = _common(amx=False)
    cpu_shim.assume_amx(common)
    cpu_shim.assume_amx(_common(amx=False))
    assert common.is_amx_tile_supported is True
    assert capsys.readouterr().err.count("this CPU has no AMX") == 1


def test_a_cpu_with_amx_is_left_alone(capsys: pytest.CaptureFixture[str]) -> None:
    common = _common(amx=True)
    cpu_shim.assume_amx(common)
    assert common.is_amx_tile_supported is True and capsys.readouterr().err == ""
