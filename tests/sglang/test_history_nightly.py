"""Acceptance: drift across nights, read from the history store, as the shipped nightly runs it.

Twelve nights of `ci/nightly.sh` against the emulator, each in the same clone cleaned as
`actions/checkout` cleans a self-hosted runner's workspace (`git clean -ffdx`, `git reset --hard`):
every results folder of the nights before is gone. The clone's own `.venv` is the one exception
kept, so that the test does not spend ten package installs; what the nights share is only the
history store, outside the checkout. A slow drift starts at night 5; the last night's report must
name it and the night it started. Twelve, not ten: the drift check needs `changepoint.MIN_HISTORY`
(11) runs, below which even a clean step is not significant; the report of night 10 says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.project import NEW_SGLANG, QWEN36, ROOT, SglangPython

# Measures a server's speed: runs alone under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.quiet_host

NIGHTS = 12
DRIFT_FROM = 5  # the first slower night
SLOWDOWN_PER_NIGHT = 0.05
# One variant, one small workload: the nights take seconds each.
DEPLOYMENT = (
    QWEN36.read_text()[: QWEN36.read_text().index("[[variants]]")]
    + """
[[variants]]
id = "mtp1"
speculative = { num_steps = 1, num_draft_tokens = 2 }

[[workloads]]
id = "chat"
prompts = "../data/prompts/chat.jsonl"
max_prompts = 2
output_len = 32
concurrency = [1]
warmup = 1
repeats = 5
"""
)


def _git(clone: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=clone, check=True, capture_output=True)


def test_nights_in_cleaned_checkouts_find_the_drift_and_its_night(tmp_path: Path, sglang_python: SglangPython) -> None:
    sglang_python(NEW_SGLANG)
    clone = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    # The working tree's files, not only its last commit: the code under test is what is checked out.
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    for old in (clone / "deployments").glob("*.toml"):
        old.unlink()
    (clone / "deployments" / "qwen36.toml").write_text(DEPLOYMENT)
    _git(clone, "add", "-A")
    _git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "working tree, one small deployment")
    subprocess.run([sys.executable, "-m", "venv", str(clone / ".venv")], check=True)
    store = tmp_path / "data" / "sglperf" / "history.sqlite"
    env = {k: v for k, v in os.environ.items() if k not in ("SGLPERF_HISTORY", "SGLPERF_SIMULATED_GPUS")}
    env |= {
        "SGLANG_VERSION": NEW_SGLANG,
        "XDG_DATA_HOME": str(tmp_path / "data"),  # the default store: the user's data folder
        "SGLPERF_GPU_LOCK_DIR": str(tmp_path / "locks"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    reports: dict[int, str] = {}
    for night in range(1, NIGHTS + 1):
        _git(clone, "clean", "-ffdx", "-q", "-e", ".venv")  # what actions/checkout does, but for .venv
        _git(clone, "reset", "-q", "--hard")
        assert not (clone / "results").exists()
        slowdown = 1.0 + SLOWDOWN_PER_NIGHT * max(0, night - DRIFT_FROM + 1)
        config = f'{{"decode_step_s": 0.01, "noise_cv": 0.003, "seed": {night}, "decode_slowdown": {slowdown}}}'
        proc = subprocess.run(
            ["bash", "ci/nightly.sh", "--emulator", f"--emulator-config={config}", "--baseline-missing=skip"],
            cwd=clone,
            env={**env, "SGLPERF_RUN_ID": f"night-{night:02d}", "RESULTS_DIR": f"results/nightly-{night:02d}"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"sglperf history: run night-{night:02d} recorded in {store}" in proc.stdout
        reports[night] = (clone / "results" / f"nightly-{night:02d}" / "report.md").read_text()
    assert "Drift: not checked yet: 10 run(s) of this series stored, 11 needed" in reports[10]
    report = reports[NIGHTS]
    drift = next(line for line in report.splitlines() if line.startswith("**Drift**: decode_tok_s"))
    started = int(drift.split("(night-")[1][:2])
    assert DRIFT_FROM - 1 <= started <= DRIFT_FROM + 1, drift
    assert (clone / "results" / f"nightly-{NIGHTS:02d}" / "plots" / "qwen36-mtp1-chat-c1-history.png").is_file()
    shutil.rmtree(clone / ".venv", ignore_errors=True)
