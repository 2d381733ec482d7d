"""`--update-baselines` that refreshes nothing fails: on a machine without a GPU every measurement
skips, and the run used to exit 0, leaving the person who asked believing the baselines were new."""

from __future__ import annotations

import pytest

from ..support.project import QWEN36, make_project

pytest_plugins = ["pytester"]


def test_a_refresh_that_refreshed_nothing_fails_naming_why(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SGLPERF_SIMULATED_GPUS", raising=False)
    monkeypatch.setenv("SGLPERF_GPU_LOCK_DIR", str(pytester.path / "gpu-locks"))
    make_project(pytester.path, QWEN36.read_text())
    pytester.makeini("[pytest]\ntestpaths = deployments\n")
    args = (
        "-m",
        "measure",
        "-k",
        "mtp1 and decode-chat",
        "-p",
        "no:cacheprovider",
        f"--results-dir={pytester.path / 'r'}",
    )
    refresh = pytester.runpytest_subprocess(*args, "--update-baselines", timeout=300)
    assert refresh.ret == pytest.ExitCode.TESTS_FAILED, refresh.stdout.str()
    refresh.stdout.fnmatch_lines(
        ["sglperf: --update-baselines refreshed no baseline (no measurement ran; skipped: no GPU visible*"]
    )
    # Without the refresh the same skips are a green run, as before.
    plain = pytester.runpytest_subprocess(*args, timeout=300)
    assert plain.ret == pytest.ExitCode.OK, plain.stdout.str()
