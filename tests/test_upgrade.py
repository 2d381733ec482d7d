"""`sglperf upgrade-check` between the two real release families."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import NEW_SGLANG, OLD_SGLANG, ROOT

SGLPERF = str(Path(sys.executable).with_name("sglperf"))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SGLPERF, "upgrade-check", *args], capture_output=True, text=True, cwd=ROOT, timeout=900)


def test_upgrade_names_removed_piecewise_flags_and_changed_prefill_default(sglang_python) -> None:
    sglang_python(OLD_SGLANG), sglang_python(NEW_SGLANG)
    proc = _run("--from", OLD_SGLANG, "--to", NEW_SGLANG)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert (
        "--enforce-piecewise-cuda-graph: removed in 0.5.23 (used by intent prefill_cuda_graph, "
        "qwen36/mtp3-full, qwen36/mtp3-prefill-graph); sglperf will use --cuda-graph-backend-prefill breakable"
    ) in out
    assert "--enable-piecewise-cuda-graph: removed in 0.5.23" in out
    assert "--mamba-scheduler-strategy: renamed in 0.5.23" in out
    line = next(l for l in out.splitlines() if "qwen36/mtp3-defaults" in l and "prefill_cuda_graph" in l)
    assert "off" in line and "-> on" in line and "SGLang default changed" in line
    assert "0 would fail with 0.5.23" in out
    assert "pynvml" not in out  # an artefact of the CPU simulation, not an SGLang change


def test_downgrade_would_break_and_exits_non_zero_json(sglang_python) -> None:
    proc = _run("--from", NEW_SGLANG, "--to", OLD_SGLANG, "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["from"] == NEW_SGLANG and report["to"] == OLD_SGLANG and report["breaking"] == 2
    broken = {(c["variant"], c["intent"]) for c in report["intents"] if c["status_after"] == "fail"}
    assert broken == {("mtp1", "prefill_cuda_graph"), ("mtp3-defaults", "prefill_cuda_graph")}
