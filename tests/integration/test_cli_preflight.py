"""`sglperf preflight` and `pytest -m preflight` as a user runs them, on input refused before any SGLang
is asked (with real releases: tests/sglang/test_cli_preflight_real.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..support.project import QWEN36, ROOT, make_project

SGLPERF = str(Path(sys.executable).with_name("sglperf"))
pytest_plugins = ["pytester"]


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SGLPERF, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_cli_bad_deployment_exits_2_with_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(QWEN36.read_text().replace("tp_size = 2", "tp_size = 0"))
    proc = _run("preflight", str(bad), "--sglang-python", sys.executable)
    assert proc.returncode == 2
    assert "bad.toml" in proc.stderr and "tp_size" in proc.stderr


def test_cli_interpreter_without_sglang() -> None:
    proc = _run("preflight", str(QWEN36), "--sglang-python", sys.executable)
    assert proc.returncode == 2
    assert "no SGLang installed for" in proc.stderr and "sglperf env build" in proc.stderr


def test_pytest_bad_deployment_is_a_collection_error_naming_the_field(pytester: pytest.Pytester) -> None:
    make_project(pytester.path)
    (pytester.path / "deployments" / "broken.toml").write_text(QWEN36.read_text().replace("tp_size = 2", "tp_size = 3"))
    pytester.makeini("[pytest]\ntestpaths = deployments\n")
    result = pytester.runpytest("-m", "preflight")
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*broken.toml: invalid deployment file:*", "*launch.tp_size: 3 exceeds runner.gpu_count 2*"]
    )
