"""`pytest -k "qwen36 and decode"` against the emulator: per variant, the meter's numbers through the
whole plugin (launch, preflight-resolved args, measurement, report) match the emulator's known truth."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sglperf.measure.prompts import load_prompts
from sglperf.testing.emulator import (
    EmulatorConfig,
    expected_accept_length,
    expected_decode_tok_s,
    prompt_tokens_of_text,
)

from ..support.project import NEW_SGLANG, SglangPython, make_project, with_workloads

# Measures a server's speed: runs alone under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.quiet_host

pytest_plugins = ["pytester"]
CONFIG = {"decode_step_s": 0.004, "prefill_s_per_token": 0.0002, "noise_cv": 0.02, "accept_prob": 0.7}
WORKLOAD = """
[[workloads]]
id = "decode-chat"
prompts = "../data/prompts/chat.jsonl"
max_prompts = 2
output_len = 96
concurrency = [1, 8]
warmup = 1
repeats = 6
"""
STEPS = {"mtp1": 1, "mtp3-defaults": 3, "mtp3-prefill-graph": 3, "mtp3-full": 3}
# Tolerances: decode rate 3% (step noise averages out over ~100 steps x 12 requests; the client adds
# well under 1%, see bench/meter_overhead.py); acceptance 4% plus the documented 1/verify-steps bias
# (the prefill token is counted). TTFT is absolute: network and client set-up only ever add time, a
# few ms per request on this machine, and at concurrency 8 requests are set up one after another.
DECODE_TOL, ACCEPT_TOL = 0.03, 0.04
TTFT_EXTRA_S = {1: 0.005, 8: 0.030}


def test_decode_items_match_the_emulator_truth(
    pytester: pytest.Pytester, sglang_python: SglangPython, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SGLPERF_SIMULATED_GPUS", raising=False)
    monkeypatch.setenv("SGLPERF_GPU_LOCK_DIR", str(pytester.path / "locks"))
    make_project(pytester.path, with_workloads(WORKLOAD))
    pytester.makeini("[pytest]\ntestpaths = deployments\n")
    results = pytester.path / "results"
    run = pytester.runpytest_subprocess(
        "-k",
        "qwen36 and decode",
        f"--sglang-python={sglang_python(NEW_SGLANG)}",
        "--emulator",
        f"--emulator-config={json.dumps(CONFIG)}",
        "--baseline-missing=skip",
        f"--results-dir={results}",
        "-p",
        "no:cacheprovider",
        timeout=600,
    )
    run.stdout.fnmatch_lines(
        ["*sglperf measurements (EMULATOR: a test double, not GPU results)*", "*qwen36-mtp1-decode-chat-c1 *missing*"]
    )
    outcomes = run.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes["skipped"] == 8  # no baselines yet: skipped, not passed

    config = EmulatorConfig.from_mapping(CONFIG)
    prompts = load_prompts(pytester.path / "data" / "prompts" / "chat.jsonl").prompts[:2]
    prompt_tokens = [prompt_tokens_of_text("\n".join(m.content for m in p.messages)) for p in prompts]
    for variant, steps in STEPS.items():
        for concurrency in (1, 8):
            record = json.loads(
                (results / "measurements" / f"qwen36-{variant}-decode-chat-c{concurrency}.json").read_text()
            )
            m = record["summary"]
            decode = expected_decode_tok_s(config, steps)
            assert abs(m["decode_tok_s"]["median"] / decode - 1) < DECODE_TOL, (
                variant,
                concurrency,
                m["decode_tok_s"],
                decode,
            )
            verify_steps = 95 / expected_accept_length(config.accept_prob, steps)
            accept = expected_accept_length(config.accept_prob, steps) * (1 + 1 / verify_steps)
            assert abs(m["accept_length"]["median"] / accept - 1) < ACCEPT_TOL, (variant, m["accept_length"], accept)
            ttft = float(np.mean([config.prefill_s_per_token * t for t in prompt_tokens])) + config.decode_step_s
            assert ttft - 0.001 <= m["ttft_s"]["median"] <= ttft + TTFT_EXTRA_S[concurrency], (
                variant,
                m["ttft_s"],
                ttft,
            )
            itl = 1 / decode
            assert abs(m["itl_s"]["median"] / itl - 1) < DECODE_TOL
            assert record["emulated"] and record["result"]["prompt_digest"]
    report = (results / "report.md").read_text()
    assert "test double" in report and "qwen36 / mtp3-full" in report
