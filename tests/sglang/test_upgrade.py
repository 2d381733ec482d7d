"""`sglperf upgrade-check` between the two real release families."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.project import NEW_SGLANG, OLD_SGLANG, QWEN36, ROOT, SglangPython, make_project

# The last release that still accepts the breakable/piecewise flags, deprecated with their replacement.
DEPRECATING_SGLANG = "0.5.19"

SGLPERF = str(Path(sys.executable).with_name("sglperf"))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SGLPERF, "upgrade-check", str(QWEN36), *args], capture_output=True, text=True, cwd=ROOT, timeout=900
    )


def test_upgrade_names_removed_piecewise_flags_and_changed_prefill_default(sglang_python: SglangPython) -> None:
    sglang_python(OLD_SGLANG), sglang_python(NEW_SGLANG)
    proc = _run("--from", OLD_SGLANG, "--to", NEW_SGLANG)
    # Nothing the upgrade changes fails: single-batch overlap is inert on the dense model with either release,
    # named as standing, not the upgrade's doing, and so not a reason to hold the upgrade back.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert (
        "--enforce-piecewise-cuda-graph: removed in 0.5.23 (used by qwen36/mtp3-full, qwen36/mtp3-prefill-graph); "
        "sglperf will use --cuda-graph-backend-prefill breakable"
    ) in out
    # Only the flags the deployment passes: sglperf's own spelling of an intent follows the release by itself.
    assert "--enable-piecewise-cuda-graph" not in out
    assert "--mamba-scheduler-strategy: renamed in 0.5.23" in out
    line = next(ln for ln in out.splitlines() if "qwen36/mtp3-defaults" in ln and "prefill_cuda_graph" in ln)
    assert "off" in line and "-> on" in line and "SGLang default changed" in line
    assert "0 would fail with 0.5.23, 1 fail on both" in out
    standing = out.split("Failing with 0.5.13 and 0.5.23 alike (not the upgrade's doing):\n", 1)[1]
    assert standing.startswith("  qwen36/mtp3-full single_batch_overlap: enable_single_batch_overlap = True"), standing
    vision = next(ln for ln in out.splitlines() if "mtp3-full" in ln and "vision_weights_skipped" in ln)
    assert "inert->pass" in vision  # 0.5.23's ModelConfig reads the override; 0.5.13 built the tower anyway
    assert "pynvml" not in out  # an artefact of the CPU simulation, not an SGLang change
    # Under the intents: the fields, with the rule on each side; the graph sizes, renamed, are no change.
    lines = out.splitlines()
    at = lines.index("  qwen36/mtp3-defaults:")
    assert lines[at + 1] == "    disable_piecewise_cuda_graph: True -> (absent)"
    assert lines[at + 2].startswith("        0.5.13: _handle_piecewise_cuda_graph (server_args.py:")
    assert lines[at + 2].endswith('"8. Multimodal / VLM models"')
    assert not any("cuda_graph_max_bs" in ln for ln in lines)


def test_downgrade_would_break_and_exits_non_zero_json(sglang_python: SglangPython) -> None:
    proc = _run("--from", NEW_SGLANG, "--to", OLD_SGLANG, "--json")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    # Two prefill graphs off again and the vision tower built again; the standing inert one is not counted.
    assert report["from"] == NEW_SGLANG and report["to"] == OLD_SGLANG and report["breaking"] == 3
    broken = {(c["variant"], c["intent"]) for c in report["intents"] if c["status_after"] == "fail"}
    assert broken == {("mtp1", "prefill_cuda_graph"), ("mtp3-defaults", "prefill_cuda_graph")}
    inert = {(c["variant"], c["intent"]) for c in report["intents"] if c["status_after"] == "inert"}
    assert inert == {("mtp3-full", "single_batch_overlap"), ("mtp3-full", "vision_weights_skipped")}


def test_a_deprecated_then_removed_flag_gets_the_older_releases_own_replacement(
    sglang_python: SglangPython, tmp_path: Path
) -> None:
    """0.5.19 deprecates --enable-breakable-cuda-graph, 0.5.20 removes it; no intent or table of
    sglperf's knows it, so the replacement can only come from the releases' own words (0.5.19's parser, or
    the ledger read from it)."""
    sglang_python(DEPRECATING_SGLANG), sglang_python(NEW_SGLANG)
    make_project(tmp_path)
    text = QWEN36.read_text().replace('id = "mtp1"\n', 'id = "mtp1"\nflags = ["--enable-breakable-cuda-graph"]\n', 1)
    (tmp_path / "deployments" / "qwen36.toml").write_text(text)
    proc = subprocess.run(
        [
            SGLPERF,
            "upgrade-check",
            str(tmp_path / "deployments" / "qwen36.toml"),
            "--from",
            DEPRECATING_SGLANG,
            "--to",
            NEW_SGLANG,
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    report = json.loads(proc.stdout)
    change = next(f for f in report["flags"] if f["flag"] == "--enable-breakable-cuda-graph")
    # Removed from 0.5.23's parser, and renamed in the releases' own words (0.5.19's deprecation).
    assert change["change"] == "renamed" and change["replacement"] == "--cuda-graph-backend-prefill=breakable"
    # The releases' own words: the shipped ledger is read from their parsers (ci/refresh-deprecations.py).
    assert DEPRECATING_SGLANG in change["source"], change["source"]
    assert (
        "is deprecated" in change["release_says"] and "--cuda-graph-backend-prefill=breakable" in change["release_says"]
    )


WALKED_VARIANT = """
[[variants]]
id = "prefill-tokens"
description = "the prefill graph's largest size, by 0.5.13's flag"
flags = ["--piecewise-cuda-graph-max-tokens", "8192"]
"""


@pytest.mark.long  # ten releases resolved, eight environments built on first use (ci/selftest-long.sh)
def test_the_walk_names_the_release_that_turned_the_prefill_graph_on_and_the_flags_replacement(
    sglang_python: SglangPython, tmp_path: Path
) -> None:
    make_project(tmp_path, QWEN36.read_text() + WALKED_VARIANT)
    sglang_python(OLD_SGLANG), sglang_python(NEW_SGLANG)
    proc = subprocess.run(
        [SGLPERF, "upgrade-check", "deployments/qwen36.toml", "--from", OLD_SGLANG, "--to", NEW_SGLANG, "--walk"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=3600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # single-batch overlap stays inert
    lines = proc.stdout.splitlines()
    walked = next(ln for ln in lines if ln.startswith("Releases walked: "))
    assert walked.startswith(f"Releases walked: {OLD_SGLANG} -> 0.5.14 -> ") and walked.endswith(f" -> {NEW_SGLANG}")
    # Read from each release's own parser: 0.5.14 deprecated the flag and named its replacement.
    assert (
        "  --piecewise-cuda-graph-max-tokens -> --cuda-graph-max-bs-prefill (0.5.14 deprecated "
        f"--piecewise-cuda-graph-max-tokens and named it); accepted by {NEW_SGLANG}"
    ) in lines
    for variant in ("mtp1", "mtp3-defaults"):
        at = lines.index(
            f"  qwen36/{variant}:",
            lines.index("Where each change happened (the first release with the new value, and its rule)"),
        )
        on = next(i for i in range(at, len(lines)) if "intent prefill_cuda_graph: off -> on" in lines[i])
        assert lines[on].startswith("    0.5.16: "), lines[on]
        assert lines[on + 1].strip().startswith("SGLang rule _parse_cuda_graph_config (server_args.py:"), lines[on + 1]
