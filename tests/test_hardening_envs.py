"""Issue 13, the environment and preflight half: versions never escape the cache, a damaged preflight
cache heals itself, bad interpreters are one line, emulated runs lock their own GPUs, and the
documented `sglperf preflight` works right after set-up."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from sglperf import preflight
from sglperf.cli import main
from sglperf.model.deployment import Deployment, load
from sglperf.model.verdict import Status
from sglperf.preflight import resolver as resolver_module
from sglperf.session import LiveOptions, LiveSession, PreflightSession
from sglperf.sglang import envs

from .conftest import NEW_SGLANG, QWEN36


@pytest.mark.parametrize("version", ["x/../../../victim", "../victim", "0.5.23/..", "v0.5 23", "0.5.23+local"])
def test_a_version_is_checked_before_it_names_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path / "h" / "i" / "j"))
    assert main(["preflight", str(QWEN36), "--sglang", version]) == 2
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
        envs._remove_ours(outside)
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


def test_a_release_that_does_not_exist_leaves_nothing_and_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SGLPERF_HOME", str(tmp_path))
    assert main(["env", "build", "9.9.9"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("sglperf:")]
    assert errors == [errors[0]] and "SGLang 9.9.9 is not on the package index" in errors[0], lines
    assert len(lines) <= 2, lines  # one progress line, one error: no flood of pip output
    assert not (tmp_path / "envs" / "sglang-9.9.9").exists()


def _program(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("not-executable", "cannot be run"),
        ("garbage", "is not a Python interpreter"),
        ("hangs", "did not answer within"),
    ],
)
def test_a_bad_python_is_one_line_and_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
    expected: str,
) -> None:
    monkeypatch.setattr(resolver_module, "INTERPRETER_TIMEOUT_S", 1.0)
    python = {
        "not-executable": "/etc/passwd",
        "garbage": _program(tmp_path, "garbage", "echo 'hello there'"),
        "hangs": _program(tmp_path, "hangs", "sleep 31.4159"),
    }[case]
    started = time.monotonic()
    assert main(["preflight", str(QWEN36), "--python", python]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0] and python in err[0], err
    # The timeout ends the program and everything it started (here the script's sleep), at once.
    assert time.monotonic() - started < 10
    assert not [p for p in psutil.process_iter(["cmdline"]) if "31.4159" in " ".join(p.info["cmdline"] or [])]


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


def _statuses(deployment: Deployment, resolver: preflight.Resolver) -> dict[tuple[str, str], Status]:
    try:
        return {(c.variant.id, v.intent): v.status for c in preflight.check(deployment, resolver) for v in c.verdicts}
    finally:
        resolver.close()


def _cached_run(sglang_python: Any, cache: Path) -> tuple[Deployment, str, dict[tuple[str, str], Status]]:
    """qwen36 resolved once by SGLang 0.5.23 into ``cache``: (deployment, python, the verdicts)."""
    deployment = load(QWEN36)
    python = sglang_python(NEW_SGLANG)
    return deployment, python, _statuses(deployment, preflight.Resolver(python, deployment.runner, cache_dir=cache))


@pytest.mark.needs_sglang
def test_a_damaged_preflight_cache_is_recomputed_and_said_once(sglang_python, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    deployment, python, before = _cached_run(sglang_python, cache)
    entries = sorted(cache.glob("*.json"))
    damages = [b"\xff\xfe not utf-8", b"{}", b"[]", b'{"logs": "x"}']
    for path, damage in zip(entries, damages * len(entries)):
        path.write_bytes(damage)
    said: list[str] = []
    after = _statuses(deployment, preflight.Resolver(python, deployment.runner, cache_dir=cache, progress=said.append))
    assert after == before
    assert len(said) == 1 and "recomputing" in said[0], said
    assert all(json.loads(p.read_text()) for p in cache.glob("*.json"))  # healed on disk too


@pytest.mark.needs_sglang
def test_cache_damage_that_is_not_ours_to_remove_is_worked_around_and_a_wrong_release_never_trusted(
    sglang_python, tmp_path: Path
) -> None:
    """A folder where an entry should be (left alone, that entry not cached), JSON nested 200k deep,
    a well-formed release entry of another release, and a cache path that is a file."""
    cache = tmp_path / "cache"
    deployment, python, before = _cached_run(sglang_python, cache)
    entries = sorted(cache.glob("*.json"))
    (release,) = [p for p in entries if "sglang_version" in json.loads(p.read_text())]
    others = [p for p in entries if p != release]
    record = json.loads(release.read_text())
    release.write_text(json.dumps({**record, "sglang_version": "0.0.1"}))
    others[0].unlink()
    others[0].mkdir()
    others[1].write_bytes(b"[" * 200_000 + b"]" * 200_000)
    said: list[str] = []
    second = preflight.Resolver(python, deployment.runner, cache_dir=cache, progress=said.append)
    assert second.release().version == NEW_SGLANG
    assert _statuses(deployment, second) == before and others[0].is_dir()
    assert json.loads(release.read_text())["sglang_version"] == NEW_SGLANG
    assert all("Traceback" not in line for line in said) and any("recomputing" in line for line in said), said
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    said.clear()
    third = preflight.Resolver(python, deployment.runner, cache_dir=not_a_folder, progress=said.append)
    assert _statuses(deployment, third) == before
    assert any("preflight cache not used" in line and "is a file" in line for line in said), said


@pytest.mark.needs_sglang
def test_the_documented_preflight_works_right_after_set_up(sglang_python, tmp_path: Path) -> None:
    """The harness venv has no SGLang: the newest managed release is used, and said."""
    sglang_python(NEW_SGLANG)
    said: list[str] = []
    chosen = envs.choose_python(progress=said.append)
    assert chosen == str(envs.env_for(NEW_SGLANG).python) or "sglang-" in chosen
    assert said and "using the managed SGLang" in said[0]
    assert os.path.exists(chosen)


@pytest.mark.parametrize(
    ("version", "module"), [("0.5.13", "sglang.bench_serving"), (NEW_SGLANG, "sglang.benchmark.serving")]
)
def test_bench_serving_is_found_where_each_release_keeps_it(sglang_python, version: str, module: str) -> None:
    # 0.5.23 moved it and deprecates the old path; 0.5.13 has only the old one.
    assert envs.bench_serving_module(sglang_python(version)) == module


def test_an_interpreter_without_sglang_has_no_bench_serving_and_says_so() -> None:
    with pytest.raises(envs.EnvBuildError, match=f"{sys.executable}: none of sglang.benchmark.serving, sglang.bench"):
        envs.bench_serving_module(sys.executable)
