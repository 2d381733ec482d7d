"""The GitHub Actions workflows parse and call only scripts that exist (the scripts themselves:
tests/integration/test_ci_scripts.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ..support.project import ROOT

WORKFLOWS = sorted((ROOT / "ci" / "workflows").glob("*.yml"))


def test_there_are_the_three_workflows_for_gpu_runners_and_the_long_selftest() -> None:
    assert {p.stem for p in WORKFLOWS} == {"nightly", "upgrade", "refresh-baselines", "selftest-long"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.stem)
def test_workflow_parses_and_calls_existing_scripts(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` as True
    assert "workflow_dispatch" in triggers
    for name, job in doc["jobs"].items():
        labels = "vars.SGLPERF_SELFTEST_RUNNER_LABELS" if path.stem == "selftest-long" else "vars.SGLPERF_RUNNER_LABELS"
        assert labels in job["runs-on"], f"{path.name}:{name}: runner labels must be configurable"
        runs = [step["run"] for step in job["steps"] if "run" in step]
        assert runs, f"{path.name}:{name} runs nothing"
        scripts = [m for run in runs for m in re.findall(r"bash (ci/[\w.-]+\.sh)", run)]
        assert scripts, f"{path.name}:{name} does not call the scripts a person runs locally"
        for script in scripts:
            assert (ROOT / script).is_file(), f"{path.name} calls missing {script}"
    if path.stem == "nightly":
        assert "schedule" in triggers
        assert any("upload-artifact" in step.get("uses", "") for step in doc["jobs"]["nightly"]["steps"])
