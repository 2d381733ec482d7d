"""docs/getting-started.md, run as a new user runs it: a fresh repository outside this checkout, sglperf
installed into its own venv from the checkout, `sglperf init`, preflight with a managed SGLang release,
and an emulator record and compare. Each bash line of the page runs verbatim; what differs from a user's
machine is only the environment: ``$SGLPERF_SRC`` names this checkout, ``../configs/`` holds the two
config.json files of tests/data/hf-configs, the history store is the test's own, and PYTEST_ADDOPTS makes
the emulator fast (its speed is a test double's: what is checked is the loop, not a number)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from ..support.project import ROOT

# Records and then compares a speed: runs alone under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.quiet_host

PAGE = ROOT / "docs" / "getting-started.md"
CONFIGS = ROOT / "tests" / "data" / "hf-configs"
EMULATOR = {"decode_step_s": 0.002, "prefill_s_per_token": 0.0002, "noise_cv": 0.02}
KEY = "llama-3.1-8b-instruct"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", PAGE.read_text(), re.S | re.M)


def _run(line: str, repo: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["bash", "-c", line], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{line}\nexit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _untracked(checkout: Path) -> set[str]:
    status = subprocess.run(["git", "status", "--porcelain"], cwd=checkout, capture_output=True, text=True, check=True)
    return {line[3:] for line in status.stdout.splitlines() if line.startswith("??")}


def test_the_page_takes_a_new_repository_from_nothing_to_a_compared_baseline(tmp_path: Path) -> None:
    repo, configs = tmp_path / "repo", tmp_path / "configs"
    repo.mkdir()
    shutil.copytree(CONFIGS, configs)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    env = {
        **os.environ,
        "SGLPERF_SRC": str(ROOT),
        "SGLPERF_HISTORY": str(tmp_path / "history.sqlite"),
        "SGLPERF_GPU_LOCK_DIR": str(tmp_path / "locks"),
        "PYTEST_ADDOPTS": " ".join(
            (f"--emulator-config={shlex.quote(json.dumps(EMULATOR))}", "--max-host-load=1", "-p no:cacheprovider")
        ),
    }
    for name in ("SGLPERF_SIMULATED_GPUS", "VIRTUAL_ENV", "PYTHONPATH", "SGLPERF_MODEL_PATH"):
        env.pop(name, None)
    install, init, preflight, measure = (block.strip().splitlines() for block in _blocks("bash"))
    checkout_before = _untracked(ROOT)
    outputs = {line: _run(line, repo, env) for block in (install, init, preflight, measure) for line in block}

    # pip's in-tree build of the checkout (build/) is ignored there: installing leaves it as it was.
    assert _untracked(ROOT) <= checkout_before, _untracked(ROOT) - checkout_before

    # Installed into the repository's own venv, not run from the checkout.
    where = _run(".venv/bin/python -c 'import sglperf; print(sglperf.__file__)'", repo, env).stdout
    assert where.startswith(str(repo / ".venv")), where

    # The deployment on the page is the one init wrote, byte for byte; so is the listing of what it wrote.
    (shown,) = _blocks("toml")
    assert (repo / "deployments" / f"{KEY}.toml").read_text() == shown
    listing = next(b for b in _blocks("text") if "pytest.ini" in b)
    for path in (line.split()[0] for line in listing.splitlines()):
        assert (repo / path).is_file(), path

    # Preflight passed every intent of both variants, in the command and under pytest.
    command, under_pytest = (outputs[line].stdout for line in preflight)
    assert "SGLang 0.5.23: 7 passed, 0 failed, 0 inert, 0 errors, 0 unproven" in command, command
    assert re.search(r"\b7 passed\b", under_pytest), under_pytest

    # The emulator recorded a baseline per variant, compared against them and wrote its report.
    baselines = repo / "baselines" / "emulator" / "1xl40s" / KEY
    assert sorted(p.name for p in baselines.glob("*.json")) == ["defaults.json", "eagle3.json"]
    assert (repo / "results" / "compared" / "report.md").is_file()
    # The same emulator twice: the compared run passed (exit 0 above), and compare says nothing moved, or
    # names what noise moved past its floor.
    compared = outputs[measure[-1]].stdout
    assert re.search(r"between A .*\(\S+\) and B .*\(\S+\)", compared) or "decode_tok_s" in compared, compared

    # .gitignore keeps results and locks out of git; the baselines are left to commit.
    status = _run("git status --porcelain --untracked-files=all", repo, env).stdout
    assert "results/" not in status and ".lock" not in status, status
    assert f"baselines/emulator/1xl40s/{KEY}/defaults.json" in status
