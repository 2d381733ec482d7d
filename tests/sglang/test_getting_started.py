"""docs/getting-started.md, run as a new user runs it: a fresh repository outside this checkout, sglperf
installed into its own venv from the checkout, `sglperf init`, preflight with a managed SGLang release,
and an emulator record and compare. Each bash line of the page runs verbatim, with no option added (no
PYTEST_ADDOPTS): the page's own settings make the emulator fast and hold on a shared host. What differs
from a user's machine is only the environment: ``$SGLPERF_SRC`` names this checkout, ``../configs/`` holds
the two config.json files of tests/data/hf-configs, the history store is the test's own (the user's is
left alone), and the SGLang environments are this machine's, built already (bench/first_run.py --page
times the page on a fresh machine, where they are built)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from .. import docs_check
from ..support.project import ROOT

PAGE = ROOT / "docs" / "getting-started.md"
CONFIGS = ROOT / "tests" / "data" / "hf-configs"
KEY = "llama-3.1-8b-instruct"
# Set by a test run or a CI job, never by a new user: the page must pass without them.
NOT_A_USERS = ("PYTEST_ADDOPTS", "SGLPERF_GPU_LOCK_DIR", "SGLPERF_SIMULATED_GPUS", "VIRTUAL_ENV", "PYTHONPATH")


def _blocks(lang: str) -> list[str]:
    """The page's blocks in ``lang``, each ending in a newline, as the docs check reads them."""
    return [block.text + "\n" for block in docs_check.blocks(PAGE) if block.lang == lang]


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
    env = {**os.environ, "SGLPERF_SRC": str(ROOT), "SGLPERF_HISTORY": str(tmp_path / "history.sqlite")}
    for name in (*NOT_A_USERS, "SGLPERF_MODEL_PATH"):
        env.pop(name, None)
    install, init, preflight, measure = (block.strip().splitlines() for block in _blocks("bash"))
    checkout_before = _untracked(ROOT)
    outputs = {line: _run(line, repo, env) for block in (install, init, preflight, measure) for line in block}

    # The in-tree build of the checkout (build/, its egg-info) is ignored there: installing leaves it as it was.
    assert _untracked(ROOT) <= checkout_before, _untracked(ROOT) - checkout_before

    # Installed into the repository's own venv, not run from the checkout.
    where = _run(".venv/bin/python -c 'import sglperf; print(sglperf.__file__)'", repo, env).stdout
    assert where.startswith(str(repo / ".venv")), where
    # With uv, which builds each SGLang environment in seconds where pip takes minutes: the venv's sglperf
    # uses the venv's uv, and would have it however installed (the page's pip alternative too): a dependency.
    uv = _run(".venv/bin/python -c 'from sglperf.sglang import envs; print(envs.uv_executable())'", repo, env)
    assert uv.stdout.strip() == str(repo / ".venv" / "bin" / "uv"), uv.stdout
    requires = _run(".venv/bin/python -c 'import importlib.metadata as m; print(m.requires(\"sglperf\"))'", repo, env)
    assert re.search(r"'uv\b", requires.stdout), requires.stdout

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

    # .gitignore keeps results and locks out of git; the baselines are left to commit. (The venv is not
    # sglperf's: uv leaves a .lock of its own there.)
    status = _run("git status --porcelain --untracked-files=all", repo, env).stdout
    ours = "".join(line for line in status.splitlines(keepends=True) if not line[3:].startswith(".venv/"))
    assert "results/" not in ours and ".lock" not in ours, status
    assert f"baselines/emulator/1xl40s/{KEY}/defaults.json" in status
