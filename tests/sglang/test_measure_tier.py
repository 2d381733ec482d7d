"""`pytest -k "qwen36 and decode"` against the emulator: per variant, the meter's numbers through the
whole plugin (launch, preflight-resolved args, measurement, report) match the emulator's known truth."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from sglperf.model.prompts import load_prompts
from sglperf.testing.emulator import (
    EmulatorConfig,
    expected_accept_length,
    prompt_tokens_of_text,
)

from ..support.project import NEW_SGLANG, SglangPython, make_project, with_workloads
from ..support.quiet_host import skip_if_the_host_stayed_busy

# Measures a server's speed: runs alone under pytest-xdist (tests/conftest.py). Long (ci/selftest-long.sh):
# .ci/run keeps the meter against the emulator's truth (test_meter_emulator) and against the real CPU server
# (test_emulator_contract).
pytestmark = [pytest.mark.quiet_host, pytest.mark.long]

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
# Tolerances. The kernels' half of decode speed, verify steps/s, has an exact truth (1 / decode_step_s):
# 3% (step noise averages out over ~35 steps x 12 requests; the client adds well under 1%, see
# bench/meter_overhead.py). Acceptance is drawn per request, so its median over 6 rounds of 2 requests
# has a sampling error of its own: for 3 draft steps at p=0.7 a step yields 2.53 tokens with SD 1.24,
# a round's ~76 steps 5.6%, a median of 6 rounds about 2.9%. 10% is 3.4 of those, plus the documented
# 1/verify-steps bias (the prefill token is counted). Decode tok/s, the product of the two halves, is
# checked as that product. TTFT is absolute: network and client set-up only ever add time, a few ms per
# request on this machine, and at concurrency 8 requests are set up one after another.
DECODE_TOL, ACCEPT_TOL = 0.03, 0.10
TTFT_EXTRA_S = {1: 0.005, 8: 0.030}


def test_decode_items_match_the_emulator_truth(
    pytester: pytest.Pytester, sglang_python: SglangPython, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SGLPERF_SIMULATED_GPUS", raising=False)
    monkeypatch.setenv("SGLPERF_GPU_LOCK_DIR", str(pytester.path / "locks"))
    python = sglang_python(NEW_SGLANG)
    make_project(pytester.path, with_workloads(WORKLOAD))
    pytester.makeini("[pytest]\ntestpaths = deployments\n")
    results = pytester.path / "results"
    run = pytester.runpytest_subprocess(
        "-k",
        "qwen36 and decode",
        f"--sglang-python={python}",
        "--emulator",
        f"--emulator-config={json.dumps(CONFIG)}",
        "--baseline-missing=skip",
        f"--results-dir={results}",
        "-p",
        "no:cacheprovider",
        "-x",  # a neighbour that keeps the host busy refuses every item after a minute's wait: one is enough
        timeout=600,
    )
    skip_if_the_host_stayed_busy(run)
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
            step_rate = 1 / config.decode_step_s
            assert abs(m["verify_steps_s"]["median"] / step_rate - 1) < DECODE_TOL, (
                variant,
                concurrency,
                m["verify_steps_s"],
                step_rate,
            )
            verify_steps = 95 / expected_accept_length(config.accept_prob, steps)
            accept = expected_accept_length(config.accept_prob, steps) * (1 + 1 / verify_steps)
            assert abs(m["accept_length"]["median"] / accept - 1) < ACCEPT_TOL, (variant, m["accept_length"], accept)
            # decode tok/s = verify steps/s x tokens per step; acceptance counts the prefill token too
            # (96 tokens over the verify steps, decode 95), and the per-round medians only nearly multiply.
            per_step = m["accept_length"]["median"] * (1 - 1 / 96)
            decode = m["verify_steps_s"]["median"] * per_step
            assert abs(m["decode_tok_s"]["median"] / decode - 1) < DECODE_TOL, (variant, concurrency, m, decode)
            ttft = float(np.mean([config.prefill_s_per_token * t for t in prompt_tokens])) + config.decode_step_s
            assert ttft - 0.001 <= m["ttft_s"]["median"] <= ttft + TTFT_EXTRA_S[concurrency], (
                variant,
                m["ttft_s"],
                ttft,
            )
            assert abs(m["itl_s"]["median"] * m["decode_tok_s"]["median"] - 1) < DECODE_TOL  # one per token
            assert record["emulated"] and record["result"]["prompt_digest"]
    report = (results / "report.md").read_text()
    assert "test double" in report and "qwen36 / mtp3-full" in report
    # Provenance reads torch's version file without importing torch: it must say what the import says.
    imported = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__, torch.version.cuda or 'none')"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert [record["provenance"]["torch_version"], record["provenance"]["cuda_version"]] == imported
