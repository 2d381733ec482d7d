"""Acceptance: drift across nights, read from the history store, as the shipped nightly runs it.

Real nights of `ci/nightly.sh` against the emulator, each in the same clone cleaned as
`actions/checkout` cleans a self-hosted runner's workspace (`git clean -ffdx`, `git reset --hard`):
every results folder of the nights before is gone. The clone's own `.venv` is the one exception
kept, so that the test does not spend package installs; what the nights share is only the history
store, outside the checkout. A slow drift starts at night 5; the last night's report must name it and
the night it started. Twelve nights, because the drift check needs `changepoint.MIN_HISTORY` (11)
runs, below which even a clean step is not significant; the report of night 10 says so.

Four of the twelve run for real (the first, and the last three, whose reports are read): they prove the
plumbing (a cleaned checkout, the default store in the user's data folder, the report written from
it). Nights 2 to 9 are written into that store by the test, as copies of night 1's stored run with its
decode tok/s slowed as the emulator would have been: the drift statistics read them as they read any
stored night. Twelve real nights took 3.1 minutes of every CI run for the same proof.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglperf.history import open_store
from sglperf.history.records import StoredRun
from sglperf.model.measurement import MeasurementRecord

from ..support.project import NEW_SGLANG, QWEN36, ROOT, SglangPython

# Measures a server's speed: runs alone under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.quiet_host

NIGHTS = 12
REAL_NIGHTS = (1, 10, 11, 12)
DRIFT_FROM = 5  # the first slower night
SLOWDOWN_PER_NIGHT = 0.05
# One variant, one small workload: the nights take seconds each.
DEPLOYMENT = (
    QWEN36.read_text()[: QWEN36.read_text().index("[[variants]]")].replace('reference_variant = "mtp3-defaults"\n', "")
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


def _slowdown(night: int) -> float:
    return 1.0 + SLOWDOWN_PER_NIGHT * max(0, night - DRIFT_FROM + 1)


def _as_night(first: StoredRun, night: int) -> StoredRun:
    """Night 1's stored run as night ``night`` would have been stored: its decode tok/s divided by that
    night's slowdown. Same start time, a later run id: the store orders runs by time, then id."""
    run_id = f"night-{night:02d}"
    factor = 1.0 / _slowdown(night)

    def slowed(record: MeasurementRecord) -> MeasurementRecord:
        summary = record.summary["decode_tok_s"]
        return record.model_copy(
            update={
                "run_id": run_id,
                "samples": {**record.samples, "decode_tok_s": [v * factor for v in record.samples["decode_tok_s"]]},
                "summary": {
                    **record.summary,
                    "decode_tok_s": summary.model_copy(
                        update={m: getattr(summary, m) * factor for m in ("median", "p10", "p90")}
                    ),
                },
            }
        )

    identity = dataclasses.replace(first.identity, run_id=run_id)
    return StoredRun(identity, tuple(map(slowed, first.measurements)), first.verdicts)


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
    for night in REAL_NIGHTS:
        _git(clone, "clean", "-ffdx", "-q", "-e", ".venv")  # what actions/checkout does, but for .venv
        _git(clone, "reset", "-q", "--hard")
        assert not (clone / "results").exists()
        config = f'{{"decode_step_s": 0.01, "noise_cv": 0.003, "seed": {night}, "decode_slowdown": {_slowdown(night)}}}'
        proc = subprocess.run(
            # Guard off: the nights check what the report says; a neighbour on a shared runner must not
            # turn one into "host stayed busy".
            [
                *("bash", "ci/nightly.sh", "--emulator", f"--emulator-config={config}"),
                *("--baseline-missing=skip", "--max-host-load=1"),
            ],
            cwd=clone,
            env={**env, "SGLPERF_RUN_ID": f"night-{night:02d}", "RESULTS_DIR": f"results/nightly-{night:02d}"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"sglperf history: run night-{night:02d} recorded in {store}" in proc.stdout
        reports[night] = (clone / "results" / f"nightly-{night:02d}" / "report.md").read_text()
        if night == 1:
            history = open_store(str(store))
            assert history is not None
            try:
                first = history.run("night-01")
                assert first is not None and first.measurements
                for written in range(2, REAL_NIGHTS[1]):
                    assert history.add_run(_as_night(first, written))
            finally:
                history.close()
    assert "Drift: not checked yet: 10 run(s) of this series stored, 11 needed" in reports[10]
    report = reports[NIGHTS]
    drift = next(line for line in report.splitlines() if line.startswith("**Drift**: decode_tok_s"))
    started = int(drift.split("(night-")[1][:2])
    assert DRIFT_FROM - 1 <= started <= DRIFT_FROM + 1, drift
    assert (clone / "results" / f"nightly-{NIGHTS:02d}" / "plots" / "qwen36-mtp1-chat-c1-history.png").is_file()
    shutil.rmtree(clone / ".venv", ignore_errors=True)
