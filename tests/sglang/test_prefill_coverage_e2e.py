"""Prefill graph coverage in the measured rounds, on the emulator with SGLang 0.5.23's own resolution: a
variant whose prefill graph is captured up to 16 tokens, measured on chat prompts of about 40-100 tokens.
Preflight cannot prove it (a prompt file is counted in bytes, not tokens): unproven, never a pass. The
measured rounds decide: every one-request prefill ran eager above the largest captured size, and the
measure item fails quoting SGLang's line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..support.emulator_runs import Suite
from ..support.project import SglangPython

pytest_plugins = ["pytester"]
SGLPERF = str(Path(sys.executable).with_name("sglperf"))

WORKLOAD = """
[[workloads]]
id = "chat"
prompts = "../data/prompts/chat.jsonl"
max_prompts = 2
output_len = 16
concurrency = [1]
warmup = 1
repeats = 3
sequential = false
"""
CAPPED = """
[[variants]]
id = "prefill-capped"
description = "the prefill graph captured up to 16 tokens: every chat prompt is longer"
flags = ["--cuda-graph-max-bs-prefill", "16"]

"""


@pytest.fixture
def suite(pytester: pytest.Pytester, sglang_python: SglangPython, monkeypatch: pytest.MonkeyPatch) -> Suite:
    suite = Suite.in_project(pytester, sglang_python, monkeypatch, WORKLOAD)
    path = suite.path / "deployments" / "qwen36.toml"
    path.write_text(path.read_text().replace("[[workloads]]", CAPPED + "[[workloads]]", 1))
    return suite


def test_a_prefill_graph_below_the_prompts_is_unproven_in_preflight_and_fails_in_the_rounds(suite: Suite) -> None:
    preflight = subprocess.run(
        [SGLPERF, "preflight", "deployments/qwen36.toml", "--variant", "prefill-capped"],
        capture_output=True,
        text=True,
        cwd=suite.path,
        timeout=900,
    )
    row = next(ln for ln in preflight.stdout.splitlines() if "prefill-capped  prefill_cuda_graph" in ln)
    assert "on, up to 16 tokens" in row and row.rstrip().endswith("unproven"), row
    assert (
        "chat's prefills of up to 205 tokens (chat.jsonl counted in bytes, no tokenizer at hand) may run eager: "
        "SGLang 0.5.23 captures the prefill graph up to 16 tokens, set by the variant's own "
        "--cuda-graph-max-bs-prefill 16; the measured rounds' prefill lines decide"
    ) in preflight.stdout, preflight.stdout

    run = suite("--baseline-missing=skip", variant="prefill-capped")
    run.assert_outcomes(failed=1)
    run.stdout.fnmatch_lines(
        [
            "*prefill_cuda_graph: * of the * prefill batches logged in 3 measured rounds ran eager above the largest "
            "captured token size 16 (tokens *): SGLang logged 'Prefill batch, #new-seq: 1, #new-token: *, "
            "cuda graph: False, *; a prompt longer than the graph's sizes prefills eager*"
        ]
    )
