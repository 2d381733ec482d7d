"""`sglperf preflight` and `pytest -m preflight` as a user runs them, resolved by real SGLang releases."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.project import NEW_SGLANG, OLD_SGLANG, QWEN36, ROOT, SglangPython, make_project

SGLPERF = str(Path(sys.executable).with_name("sglperf"))
pytest_plugins = ["pytester"]


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SGLPERF, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_cli_json_records_for_new_release(sglang_python: SglangPython) -> None:
    proc = _run("preflight", str(QWEN36), "--sglang-python", sglang_python(NEW_SGLANG), "--json")
    assert proc.returncode == 1, proc.stderr  # single-batch overlap is inert on this dense model
    records = json.loads(proc.stdout)
    assert {"deployment", "variant", "intent", "expected", "actual", "ok", "detail", "sglang_version"} <= set(
        records[0]
    )
    by_key = {(r["variant"], r["intent"]): r for r in records}
    assert by_key[("mtp3-defaults", "prefill_cuda_graph")]["ok"] is True
    assert by_key[("mtp3-full", "vision_weights_skipped")]["ok"] is True  # proved by the model class: no tower
    inert = by_key[("mtp3-full", "single_batch_overlap")]
    assert inert["status"] == "inert" and inert["ok"] is False and "MoE layers" in inert["detail"]
    assert [r for r in records if r["status"] != "pass"] == [inert]
    assert {r["sglang_version"] for r in records} == {NEW_SGLANG}


def test_cli_table_and_exit_status_for_old_release(sglang_python: SglangPython) -> None:
    proc = _run("preflight", str(QWEN36), "--sglang-python", sglang_python(OLD_SGLANG))
    assert proc.returncode == 1
    assert "qwen36      mtp3-defaults" in proc.stdout
    assert '"8. Multimodal / VLM models"' in proc.stdout
    assert "2 failed, 2 inert" in proc.stdout
    # Passing, with SGLang's own caveat: the request overrides its multimodal rule.
    assert "caveat: without the request SGLang decides off: SGLang rule _handle_piecewise_cuda_graph" in proc.stdout
    assert "Used for testing." in proc.stdout


def test_pytest_items_ids_and_failure_message(pytester: pytest.Pytester, sglang_python: SglangPython) -> None:
    make_project(pytester.path, QWEN36.read_text())
    pytester.makeini("[pytest]\ntestpaths = deployments\n")
    # "=" form: pytest would take a bare path argument for a test path when finding its rootdir.
    result = pytester.runpytest(
        "-m", "preflight", "-k", "qwen36", f"--sglang-python={sglang_python(OLD_SGLANG)}", "-rA"
    )
    # 4 of the passes: overlap_schedule, kept on by 0.5.13 for every variant
    result.assert_outcomes(passed=14, failed=4, warnings=2)
    result.stdout.fnmatch_lines(
        [
            "*because: SGLang rule _handle_piecewise_cuda_graph*Multimodal*",
            "*SGLangCaveat: qwen36-mtp3-*-prefill_cuda_graph: without the request SGLang decides off*",
            "*PASSED deployments/qwen36.toml::mtp3-prefill-graph::qwen36-mtp3-prefill-graph-prefill_cuda_graph*",
            "*FAILED deployments/qwen36.toml::mtp1::qwen36-mtp1-prefill_cuda_graph*",
            "*FAILED deployments/qwen36.toml::mtp3-defaults::qwen36-mtp3-defaults-prefill_cuda_graph*",
        ]
    )


def test_a_preflight_leaves_nothing_in_tmpdir(tmp_path: Path, sglang_python: SglangPython) -> None:
    """Issue 53's audit: every preflight left a folder in TMPDIR (the simulated nvidia-smi's, made inside the
    probe). A fresh preflight cache, so that the probe really runs."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "SGLPERF_PREFLIGHT_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [SGLPERF, "preflight", str(QWEN36), "--sglang-python", sglang_python(NEW_SGLANG), "--variant", "mtp3-defaults"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(tmp.iterdir()) == []
