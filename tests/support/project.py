"""The repository's own files the tests read, and project folders laid out like it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
QWEN36 = ROOT / "deployments" / "qwen36.toml"
QWEN36_CONFIG = ROOT / "models" / "qwen3.6-27b" / "config.json"
QWEN36_CONFIG_LINE = 'config = "../models/qwen3.6-27b/config.json"'
# One release of each family the suite must handle: booleans (0.5.10-0.5.13), backend config (0.5.14+).
OLD_SGLANG = "0.5.13"
NEW_SGLANG = "0.5.23"
# What the sglang_python fixture gives: a release's managed interpreter, built on first use.
SglangPython = Callable[[str], str]
SGLPERF = str(Path(sys.executable).with_name("sglperf"))


def make_project(root: Path, deployment_text: str | None = None) -> Path:
    """A folder laid out like the repository: deployments/qwen36.toml, models/, data/prompts/."""
    (root / "deployments").mkdir(exist_ok=True)
    (root / "models" / "qwen3.6-27b").mkdir(parents=True, exist_ok=True)
    shutil.copy(QWEN36_CONFIG, root / "models" / "qwen3.6-27b" / "config.json")
    shutil.copytree(ROOT / "data" / "prompts", root / "data" / "prompts", dirs_exist_ok=True)
    if deployment_text is not None:
        (root / "deployments" / "qwen36.toml").write_text(deployment_text)
    return root


def with_workloads(text: str, *, own_model_folder: bool = False) -> str:
    """A deployment text with its [[workloads]] replaced (fast ones for emulator tests; the variants' expected
    effects, which name the shipped workloads, left out), naming the
    repository's model folder (see `shared_model`) unless the test puts files in a folder of its own."""
    start = QWEN36.read_text().index("# Workloads for the measurement tier.")
    # The shipped expect_effect names a shipped workload: gone with them (a test states its own).
    head = "".join(line for line in QWEN36.read_text()[:start].splitlines(True) if not line.startswith("expect_effect"))
    deployment = head + text
    return deployment if own_model_folder else shared_model(deployment)


def shared_model(deployment: str) -> str:
    """The qwen36 deployment text naming the repository's config.json by its absolute path, not the copy
    `make_project` puts beside it. Preflight keys its cache by --model-path (the config's folder): projects
    that name one folder resolve their variants once per SGLang release, where a folder per test cost
    every test a fresh probe (about 20 s of CPU on a 2-CPU runner)."""
    if QWEN36_CONFIG_LINE not in deployment:
        raise ValueError(f"not the qwen36 deployment's model table: {QWEN36_CONFIG_LINE!r} is missing")
    return deployment.replace(QWEN36_CONFIG_LINE, f'config = "{QWEN36_CONFIG}"')


def one_24gb_gpu_deployment(config: str, body: str) -> str:
    """A deployment on one 24 GB GPU (the memory tier SGLang 0.5.19 gave a decode graph up to batch 24 at
    TP < 4) of the model whose config.json is ``config``, expecting the decode graph on; ``body`` holds
    its variants and workloads."""
    head = f"""\
[model]
key = "tiny-qwen3"
served_path = "/models/tiny-qwen3"
config = "{config}"

[runner]
name = "1x4090"
gpu_count = 1
gpu_name = "NVIDIA GeForce RTX 4090"
compute_capability = "8.9"
memory_gib = 24
sm_count = 128

[launch]
tp_size = 1

[expect]
decode_cuda_graph = true
"""
    return head + body


def preflight_json(
    path: Path, version: str, *extra: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``sglperf preflight PATH --sglang-version VERSION --json`` run beside the file, as a user runs it: the
    process and its verdict records (none when it printed no JSON)."""
    proc = subprocess.run(
        [SGLPERF, "preflight", str(path), "--sglang-version", version, "--json", *extra],
        capture_output=True,
        text=True,
        cwd=path.parent,
        timeout=900,
    )
    records: list[dict[str, Any]] = json.loads(proc.stdout or "[]")
    return proc, records
