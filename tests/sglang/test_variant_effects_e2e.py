"""Variant effects end to end on the emulator, as a user runs `pytest -m measure`: variants with planted
speed differences (one 8% faster in decode, one unchanged, one 5% slower in prefill only) get the right
verdicts, with intervals that cover the emulator's truth; an expect_effect the emulator does not deliver
fails with its interval; the report and `sglperf compare --variants` say the same from the records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglperf.baselines.variant_effects import variant_effects
from sglperf.model.variant_effect import EffectVerdict, VariantEffect
from sglperf.results import folder as results_folder
from sglperf.testing.emulator.timing import prompt_tokens_of_text

from ..support.emulator_runs import Suite
from ..support.project import ROOT, SglangPython, with_workloads

pytest_plugins = ["pytester"]
SGLPERF = str(Path(sys.executable).with_name("sglperf"))

STEP_S, PREFILL_S = 0.003, 0.002  # prefill long enough that TTFT (tens of ms) dwarfs a busy box's jitter
FASTER, SLOWER_PREFILL = 1.08, 1.05
# Rounds differ by the acceptance the emulator draws for each request (+-8% of decode tok/s at 0.7, +-3% at
# 0.97): every draft accepted leaves the step-time noise alone, so "unchanged" is told from "undecided".
ACCEPT = 1.0
WORKLOAD = """
[[workloads]]
id = "decode-chat"
prompts = "../data/prompts/chat.jsonl"
max_prompts = 2
output_len = 64
concurrency = [1]
warmup = 1
repeats = 12
thresholds = { ttft_s = 0.02 }  # the planted 5% (4.6% of TTFT: its first decode step is unchanged) is past it
"""
# The reference and three variants with the same speculative settings, so only the planted timing differs.
VARIANTS = """
[[variants]]
id = "mtp3-same"
description = "the reference's flags under another name"

"""
PLANTED = {
    "mtp3-prefill-graph": {"decode_slowdown": 1 / FASTER},
    "mtp3-same": {"prefill_s_per_token": PREFILL_S * SLOWER_PREFILL},
}


@pytest.fixture
def suite(pytester: pytest.Pytester, sglang_python: SglangPython, monkeypatch: pytest.MonkeyPatch) -> Suite:
    suite = Suite.in_project(pytester, sglang_python, monkeypatch, WORKLOAD)
    path = suite.path / "deployments" / "qwen36.toml"
    text = with_workloads(WORKLOAD).replace("[[workloads]]", VARIANTS + "[[workloads]]", 1)
    # mtp3-prefill-graph exists for its decode speed here; its TTFT expectation is one the emulator does not
    # deliver (its prefill is the reference's), so that item must fail with its interval.
    asked = "request = { prefill_cuda_graph = true }\n"
    expect = 'expect_effect = { decode-chat = { decode_tok_s = "higher", ttft_s = "lower" } }\n'
    path.write_text(text.replace(asked, asked + expect, 1))  # against qwen36's reference, mtp3-defaults
    return suite


def _ttft_truth() -> tuple[float, float]:
    """The TTFT ratio the emulator's timing model gives mtp3-same (prefill x1.05, the first decode step
    unchanged), for the two prompts of a round; low end with up to 3 ms of HTTP and client time per request,
    which no variant changes."""
    texts = [json.loads(line)["messages"][0]["content"] for line in (ROOT / "data/prompts/chat.jsonl").open()][:2]
    prefill = sum(PREFILL_S * prompt_tokens_of_text(t) for t in texts)
    base = prefill + 2 * STEP_S
    return (SLOWER_PREFILL * prefill + 2 * STEP_S + 0.006) / (base + 0.006), (
        SLOWER_PREFILL * prefill + 2 * STEP_S
    ) / base


def _effect(effects: list[VariantEffect], variant: str, metric: str) -> VariantEffect:
    return next(e for e in effects if e.variant == variant and e.metric == metric)


@pytest.mark.quiet_host
def test_planted_differences_get_their_verdicts_and_an_undelivered_expectation_fails(suite: Suite) -> None:
    run = suite(
        "--baseline-missing=skip",
        variant="mtp3",
        accept_prob=ACCEPT,
        decode_step_s=STEP_S,
        prefill_s_per_token=PREFILL_S,
        variants=PLANTED,
    )
    assert suite.results is not None
    folder = results_folder.collect(suite.results)
    # mtp3-prefill-graph's expectation ran its counterbalanced sessions; the other two are sequential.
    effects = variant_effects(folder.measurements, folder.sessions)
    assert {e.reference for e in effects} == {"mtp3-defaults"}

    fast = _effect(effects, "mtp3-prefill-graph", "decode_tok_s")
    assert fast.verdict is EffectVerdict.BETTER and fast.ci_low <= FASTER <= fast.ci_high, fast.line()
    same = _effect(effects, "mtp3-full", "decode_tok_s")
    assert same.verdict is EffectVerdict.NO_EFFECT and same.ci_low <= 1.0 <= same.ci_high, same.line()
    assert _effect(effects, "mtp3-full", "ttft_s").verdict is EffectVerdict.NO_EFFECT, effects
    slow_ttft = _effect(effects, "mtp3-same", "ttft_s")
    low, high = _ttft_truth()
    assert slow_ttft.verdict is EffectVerdict.WORSE, slow_ttft.line()
    assert slow_ttft.ci_low <= high and low <= slow_ttft.ci_high, (slow_ttft.line(), low, high)
    assert _effect(effects, "mtp3-same", "decode_tok_s").verdict is EffectVerdict.NO_EFFECT

    # The declared effect: decode met, TTFT not delivered, and the item fails with the interval.
    run.stdout.fnmatch_lines(
        [
            "*qwen36/mtp3-prefill-graph vs mtp3-defaults, decode-chat@c1: ttft_s * expected ttft_s lower, "
            "not detected at 98% (change *, interval *, floor 2%)*",
        ]
    )
    assert "expected decode_tok_s higher" not in run.stdout.str()
    run.stdout.fnmatch_lines(["*sglperf variant effects (EMULATOR*", "*qwen36/mtp3-prefill-graph vs mtp3-defaults*"])
    report = (suite.results / "report.md").read_text()
    assert "## Variant effects" in report and "effects-qwen36-decode-chat-c1.png" in report
    assert (suite.results / "plots" / "effects-qwen36-decode-chat-c1.png").stat().st_size > 10_000

    compared = subprocess.run(
        [SGLPERF, "compare", "--variants", str(suite.results)], capture_output=True, text=True, timeout=120
    )
    assert compared.returncode == 0, compared.stderr
    assert f"  decode_tok_s: {fast.describe()}" in compared.stdout
    as_json = subprocess.run(
        [SGLPERF, "compare", "--variants", str(suite.results), "--json"], capture_output=True, text=True, timeout=120
    )
    assert len(json.loads(as_json.stdout)) == len(effects)


@pytest.mark.quiet_host
def test_under_xdist_loadscope_a_contradicted_expectation_fails_the_run(suite: Suite) -> None:
    """Issue 53's audit: under `-n 2 --dist loadscope` (docs/live.md's form) the effect items ran before the
    other worker had measured, skipped "not measured", and a contradicted expect_effect exited 0. Now they
    run after every measurement, read the other worker's records, and the undelivered TTFT fails."""
    run = suite(
        "--baseline-missing=skip",
        "-n",
        "2",
        "--dist",
        "loadscope",
        # The two workers measure at once on this machine: each is the other's busy neighbour, by design.
        "--max-host-load=1",
        variant="mtp3-defaults or mtp3-prefill-graph",
        accept_prob=ACCEPT,
        decode_step_s=STEP_S,
        prefill_s_per_token=PREFILL_S,
        variants=PLANTED,
    )
    assert run.ret == pytest.ExitCode.TESTS_FAILED, run.stdout.str()
    run.stdout.fnmatch_lines(
        [
            "*qwen36/mtp3-prefill-graph vs mtp3-defaults, decode-chat@c1: ttft_s * expected ttft_s lower, "
            "not detected at 98%*",
            "FAILED *qwen36-mtp3-prefill-graph-decode-chat-c1-effect*",
        ]
    )
    assert "effect not judged" not in run.stdout.str()
