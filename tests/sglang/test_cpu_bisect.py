"""`sglperf bisect` on real SGLang servers on this CPU (issue 55): the no-kernel deployment (tiny-cpu-native.toml)
serves on SGLang 0.5.19 to 0.5.23 alike (each release's torch-native CPU environment, any x86-64 CPU; found by
launching each, docs/bisect.md). A bisect between two of them runs to its verdict in CI time: the walk, the
plan and its cost said first, then one A B B A quartet of fresh real servers per comparison.

Its floor is the deployment's (70%: a shared 2-CPU runner catches breakage, not 3%), so "same" is the usual
answer; a culprit would need a release to change decode speed beyond it. Either is a verdict, with its cost.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sglperf.upgrade import bisect

from ..support.cpu_tier import TINY_CPU_NATIVE, TINY_MODELS_ENV, cpu_setup
from ..support.project import SGLPERF, SglangPython
from ..support.quiet_host import skip_if_the_guard_said_so

pytestmark = [pytest.mark.needs_sglang, pytest.mark.quiet_host]
FROM, TO = "0.5.21", "0.5.23"


def test_a_bisect_on_real_cpu_servers_runs_to_its_verdict_with_its_cost(
    tmp_path: Path, sglang_python: SglangPython
) -> None:
    setup = cpu_setup()  # the tiny models (and the 0.5.23 CPU environment), or a one-line skip
    for release in ("0.5.21", "0.5.22", "0.5.23"):
        sglang_python(release)
    results = tmp_path / "bisect"
    proc = subprocess.run(
        [
            SGLPERF,
            "bisect",
            str(TINY_CPU_NATIVE),
            "--from",
            FROM,
            "--to",
            TO,
            "-k",
            "plain-decode-chat-c1",
            "--max-quartets",
            "1",
            "--results-dir",
            str(results),
            "--history-store",
            "off",
        ],
        capture_output=True,
        text=True,
        timeout=2400,
        env={**os.environ, TINY_MODELS_ENV: str(setup.models)},
    )
    print(proc.stdout)  # the verdict and its cost, in the CPU tier's log
    skip_if_the_guard_said_so(proc.stderr.splitlines())
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    plan = next(line for line in proc.stderr.splitlines() if line.startswith("bisect tiny-cpu-native-plain"))
    assert "server starts if each comparison decides in 1 quartet(s)" in plan
    first = proc.stdout.splitlines()[0]
    assert first.endswith("(CPU server: CPU numbers, not GPU results)"), first
    state = bisect.read_state(results / "bisect.json")
    assert state is not None and state.releases == ["0.5.21", "0.5.22", "0.5.23"]
    ends = state.comparisons[0]
    assert (ends.purpose, ends.quartets, ends.finished) == (bisect.Purpose.ENDPOINTS, 1, True)
    assert [s.release for s in ends.sessions] == [FROM, TO, TO, FROM]  # A B B A on fresh servers
    assert all(len(s.samples["decode_tok_s"]) == 8 for s in ends.sessions)
    answer = proc.stdout.splitlines()[1].split(":")[0]
    assert answer in {a.value for a in bisect.Answer if a is not bisect.Answer.REFUSED}, proc.stdout
    assert "cost: " in proc.stdout and "server start(s)" in proc.stdout
