"""`pytest -m measure` against the emulator in a project folder, as a user runs it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sglperf.results import folder as results_folder

from .project import NEW_SGLANG, SglangPython, make_project, with_workloads
from .quiet_host import BUSY_HOST_SHARE, QUIET_WAIT, skip_if_the_host_stayed_busy

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
    results: Path | None = None  # the last run's results folder

    @property
    def path(self) -> Path:
        return self.pytester.path

    def __call__(
        self, *args: str, sglang: str = NEW_SGLANG, variant: str = "mtp3-prefill-graph", **emulator: object
    ) -> pytest.RunResult:
        config = json.dumps({**FAST, **emulator})
        self.results = self.path / "results" / f"run{next(self.runs)}"
        result = self.pytester.runpytest_subprocess(
            "-m",
            "measure",
            "-k",
            variant,
            f"--sglang-python={self.sglang_python(sglang)}",
            "--emulator",
            f"--emulator-config={config}",
            f"--baselines-dir={self.path / 'baselines'}",
            f"--results-dir={self.results}",
            "-p",
            "no:cacheprovider",
            "-rA",
            QUIET_WAIT,
            *args,
            timeout=300,
        )
        skip_if_the_host_stayed_busy(result)
        return result

    def failed_on_a_busy_host(self) -> list[str]:
        """The last run's failed items that the rest of the machine (other processes, the hypervisor's
        steal) kept busy beyond BUSY_HOST_SHARE: their numbers measured the host, not the server."""
        assert self.results is not None
        return [
            f"{m.key} (host {m.host.median_share:.0%})"
            for m in results_folder.collect(self.results).measurements
            if m.problems and m.host is not None and m.host.median_share > BUSY_HOST_SHARE
        ]

    def on_a_quiet_host(self, *args: str, attempts: int = 3) -> pytest.RunResult:
        """Run until no item fails on a busy host (`failed_on_a_busy_host`); a failure on a quiet host is
        returned for the test to judge. Skips, naming the items, when the host never quietened."""
        for _ in range(attempts):
            result = self(*args)
            busy = self.failed_on_a_busy_host()
            if not busy:
                return result
        pytest.skip(f"not judged: in {attempts} runs items failed while the host was busy: {'; '.join(busy)}")

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
