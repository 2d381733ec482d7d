"""The tiny CPU server for the bench scripts: set up and launched exactly as the suite does it.

Imported by the scripts beside it (``python bench/<script>.py`` puts this folder on the path).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import load
from sglperf.model.prompts import PromptSet, load_prompts
from sglperf.model.workload import Workload
from sglperf.session import LiveOptions, LiveSession, PreflightSession
from sglperf.session.running import RunningVariant
from sglperf.sglang import cpu_envs
from sglperf.testing import tiny_models

REPO = Path(__file__).resolve().parents[1]
SGLANG_VERSION = "0.5.23"


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr)


def set_up(python: str | None = None) -> tuple[str, Path]:
    """(the SGLang CPU environment's interpreter, the tiny models' folder), built on first use; the
    deployments find the models through $SGLPERF_TINY_MODELS, set here."""
    python = python or str(cpu_envs.ensure_cpu_env(SGLANG_VERSION).python)
    models = tiny_models.ensure(python, tiny_models.default_cache())
    os.environ[tiny_models.TINY_MODELS_ENV] = str(models)
    return python, models


def deployment(omp_bind: str | None = None) -> Deployment:
    """deployments/tiny-cpu.toml, with SGLang's OpenMP binding replaced when ``omp_bind`` is given."""
    loaded = load(REPO / "deployments" / "tiny-cpu.toml")
    return loaded.with_launch_env({cpu_envs.CPU_OMP_BIND_ENV: omp_bind}) if omp_bind else loaded


def decode_chat(deployment: Deployment, repeats: int) -> tuple[Workload, PromptSet]:
    """The decode-chat workload with ``repeats`` rounds, and its prompts cut to max_prompts."""
    workload = next(w for w in deployment.workloads if w.id == "decode-chat").model_copy(update={"repeats": repeats})
    assert workload.prompts is not None  # a prompts file, not a synthetic set
    prompts = load_prompts(deployment.path.parent / workload.prompts)
    return workload, dataclasses.replace(prompts, prompts=prompts.prompts[: workload.max_prompts])


@contextmanager
def running(deployment: Deployment, variant: str, python: str, results: Path) -> Iterator[RunningVariant]:
    """The deployment's variant, launched the way the suite launches it (preflight included), stopped after."""
    preflight = PreflightSession(lambda: python, progress)
    live = LiveSession(LiveOptions(results_dir=results, root=REPO), preflight, progress)
    try:
        yield live.running(deployment, deployment.variant(variant))
    finally:
        live.close()
        preflight.close()
