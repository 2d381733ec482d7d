"""Interpreters, releases and environment steps sglperf cannot use, met for real: a release not on the
package index (pip asked), a program that is no Python or hangs, a Python without SGLang, a failing
build step. One line each, nothing left behind."""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

import psutil
import pytest

from sglperf import preflight
from sglperf.cli import main
from sglperf.model.deployment_file import load
from sglperf.preflight import resolver as resolver_module
from sglperf.sglang import bench_client, envs, metrics_catalogue

from ..support.project import QWEN36


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
    assert main(["preflight", str(QWEN36), "--sglang-python", python]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0] and python in err[0], err
    # The timeout ends the program and everything it started (here the script's sleep), at once.
    assert time.monotonic() - started < 10
    assert not [p for p in psutil.process_iter(["cmdline"]) if "31.4159" in " ".join(p.info["cmdline"] or [])]


def test_an_interpreter_without_sglang_has_no_bench_serving_and_says_so() -> None:
    with pytest.raises(envs.EnvBuildError, match=f"{sys.executable}: none of sglang.benchmark.serving, sglang.bench"):
        bench_client.bench_serving_module(sys.executable)


def test_interpreter_without_sglang_says_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(preflight.PreflightError) as excinfo:
        preflight.Resolver(sys.executable, load(QWEN36).runner, cache_dir=tmp_path)
    message = str(excinfo.value)
    assert f"no SGLang installed for {sys.executable}" in message
    assert "sglperf env build" in message and "pip install --no-deps sglang==" in message


def test_a_python_without_sglang_has_an_empty_catalogue(tmp_path: Path) -> None:
    import sys

    assert metrics_catalogue.catalogue(sys.executable) == {}
    assert metrics_catalogue.missing_watched({}) == []


def test_a_failed_step_names_it_with_the_output_tail_without_index_warnings() -> None:
    said: list[str] = []
    script = (
        "import sys; print('\\n'.join(f'line {i}' for i in range(40)));"
        "print('WARNING: Location x is ignored', file=sys.stderr); sys.exit(3)"
    )
    with pytest.raises(envs.EnvBuildError) as info:
        envs.run_step([sys.executable, "-c", script], "install light requirements", said.append)
    assert str(info.value) == "install light requirements failed (exit 3):\n" + "\n".join(
        f"line {i}" for i in range(32, 40)
    )
    assert said == [f"  install light requirements: {sys.executable} -c {script} ..."]
