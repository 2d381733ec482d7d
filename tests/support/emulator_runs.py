"""`pytest -m measure` against the emulator in a project folder, as a user runs it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .project import NEW_SGLANG, SglangPython, make_project, with_workloads

# Prefill long enough that TTFT (about 20 ms) dwarfs a busy box's jitter: the same 2.6-3 ms TTFT in
# test_user_fixtures moved +11.7% between two unchanged runs in CI (threshold 5%).
FAST = {"decode_step_s": 0.003, "prefill_s_per_token": 0.0005, "noise_cv": 0.02}


@dataclass
class Suite:
    """`pytest -m measure` on the emulator in a project folder, as a user runs it: one results folder per
    run, one baselines folder for all."""

    pytester: pytest.Pytester
    sglang_python: SglangPython
    runs: Iterator[int] = field(default_factory=itertools.count)

    @property
    def path(self) -> Path:
        return self.pytester.path

    def __call__(
        self, *args: str, sglang: str = NEW_SGLANG, variant: str = "mtp3-prefill-graph", **emulator: object
    ) -> pytest.RunResult:
        config = json.dumps({**FAST, **emulator})
        return self.pytester.runpytest_subprocess(
            "-m",
            "measure",
            "-k",
            variant,
            f"--sglang-python={self.sglang_python(sglang)}",
            "--emulator",
            f"--emulator-config={config}",
            f"--baselines-dir={self.path / 'baselines'}",
            f"--results-dir={self.path / 'results' / f'run{next(self.runs)}'}",
            "-p",
            "no:cacheprovider",
            "-rA",
            *args,
            timeout=300,
        )

    @classmethod
    def in_project(
        cls, pytester: pytest.Pytester, sglang_python: SglangPython, monkeypatch: pytest.MonkeyPatch, workloads: str
    ) -> Suite:
        """A project folder with qwen36 and these ``[[workloads]]``, and no simulated GPUs or shared GPU locks."""
        monkeypatch.delenv("SGLPERF_SIMULATED_GPUS", raising=False)
        monkeypatch.setenv("SGLPERF_GPU_LOCK_DIR", str(pytester.path / "gpu-locks"))
        make_project(pytester.path, with_workloads(workloads))
        pytester.makeini("[pytest]\ntestpaths = deployments\n")
        return cls(pytester, sglang_python)
