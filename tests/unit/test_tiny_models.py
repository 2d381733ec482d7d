"""The tiny models' configs: what preflight resolves against (models/tiny-*) is what the CPU tier serves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglperf.model.deployment_file import load
from sglperf.testing import tiny_models

from ..support.cpu_tier import ROOT, TINY_CPU, TINY_CPU_MTP


@pytest.mark.parametrize("kind", ["tiny-qwen3", "tiny-mimo"])
def test_committed_preflight_configs_are_the_writers(kind: str) -> None:
    for rel, content in tiny_models.configs(kind).items():
        if Path(rel).name == "config.json":
            assert json.loads((ROOT / "models" / kind / rel).read_text()) == content, rel


def test_cpu_deployments_are_cpu_runners_serving_the_tiny_models() -> None:
    for path, kind in ((TINY_CPU, "tiny-qwen3"), (TINY_CPU_MTP, "tiny-mimo")):
        deployment = load(path)
        assert deployment.runner.is_cpu and deployment.launch.tp_size == 1
        assert deployment.model.served_path == f"${{SGLPERF_TINY_MODELS}}/{kind}"
        assert deployment.config_path == (ROOT / "models" / kind / "config.json").resolve()
        assert "--device" in deployment.launch.extra_flags and deployment.launch.env["SGLANG_USE_CPU_ENGINE"] == "1"
