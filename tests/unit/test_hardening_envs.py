"""Issue 13, the environment and preflight half, in this process: versions never escape the cache, a
missing interpreter is one line, emulated runs lock their own GPUs (real interpreters and pip:
tests/integration/test_interpreters.py; the cache around real SGLang: tests/sglang/test_preflight_cache.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sglperf import preflight
from sglperf.cli import main
from sglperf.model.deployment_file import load
from sglperf.session import LiveOptions, LiveSession, PreflightSession
from sglperf.sglang import envs

from ..support.project import QWEN36


@pytest.mark.parametrize("version", ["x/../../../victim", "../victim", "0.5.23/..", "v0.5 23", "0.5.23+local"])
def test_a_version_is_checked_before_it_names_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path / "h" / "i" / "j"))
    assert main(["preflight", str(QWEN36), "--sglang-version", version]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a release version" in err[0], err
    assert (victim / "precious").read_text() == "keep me"
    assert not (tmp_path / "h").exists()  # nothing created either


def test_only_environment_folders_inside_the_cache_are_ever_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path / "home"))
    outside = tmp_path / "outside"
    outside.mkdir()
    with pytest.raises(envs.EnvBuildError, match="refusing to delete"):
        envs.remove_env_folder(outside)
    assert outside.is_dir()


def test_env_list_shows_environments_not_lock_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    root = tmp_path / "envs"
    (root / "sglang-0.5.23").mkdir(parents=True)
    (root / "sglang-0.5.23.lock").write_text("")
    (root / "sglang-junk name").mkdir()
    assert main(["env", "list"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("0.5.23") and "incomplete" in out[0]


def test_emulated_runs_lock_their_simulated_gpus_in_their_own_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SGLPERF_GPU_LOCK_DIR", raising=False)
    pre = PreflightSession(lambda: sys.executable)
    emulated = LiveSession(LiveOptions(emulator=True, results_dir=tmp_path / "r"), pre, print)
    real = LiveSession(LiveOptions(results_dir=tmp_path / "r"), pre, print)
    assert emulated._gpu_lock_dir() == tmp_path / "r" / ".gpu-locks"
    assert real._gpu_lock_dir() is None  # the machine-wide folder: real GPUs are shared by every run
    monkeypatch.setenv("SGLPERF_GPU_LOCK_DIR", str(tmp_path / "chosen"))
    assert emulated._gpu_lock_dir() is None  # the variable wins


def test_missing_interpreter_is_named(tmp_path: Path) -> None:
    with pytest.raises(preflight.PreflightError, match="interpreter /no/such/python does not exist"):
        preflight.Resolver("/no/such/python", load(QWEN36).runner, cache_dir=tmp_path)
