"""Effective-args assertions in Python, on SGLang's own resolution (no GPU needed) or, with
`sglang_server`, on what the running server reports."""

from __future__ import annotations

import os

import pytest

from sglperf import EffectiveArgsView, ServerHandle

DEPLOYMENT = os.environ.get("SGLPERF_EXAMPLE_DEPLOYMENT", "qwen36")


@pytest.mark.sglang(DEPLOYMENT)
def test_decode_cuda_graph_stays_on(sglang_effective_args: EffectiveArgsView) -> None:
    # Read the way the built-in items read it: the same on every SGLang release.
    assert sglang_effective_args.intent("decode_cuda_graph") is True


@pytest.mark.sglang(DEPLOYMENT)
def test_context_length_fits_our_longest_prompt(sglang_effective_args: EffectiveArgsView) -> None:
    context = sglang_effective_args["context_length"]
    assert context is None or context >= 1024, f"context_length {context} is too short for our prompts"


@pytest.mark.sglang(DEPLOYMENT)
def test_the_server_runs_what_preflight_predicted(sglang_server: ServerHandle) -> None:
    # Live: the server's own /server_info, and the variant's live verdicts with their evidence.
    assert sglang_server.effective_args["tp_size"] >= 1
    assert all(v.status.value != "error" for v in sglang_server.evidence), sglang_server.evidence
