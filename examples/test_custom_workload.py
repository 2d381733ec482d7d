"""A workload of our own, measured on the variant's server and judged against its stored baseline
exactly like the built-in measurement items (record it with --update-baselines)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sglperf import MeasurementRecord, Workload, assert_baseline

DEPLOYMENT = os.environ.get("SGLPERF_EXAMPLE_DEPLOYMENT", "qwen36")

SHORT_ANSWERS = Workload(
    id="short-answers",
    prompts=Path("../data/prompts/chat.jsonl"),  # relative to the deployment file, like [[workloads]]
    max_prompts=2,
    output_len=int(os.environ.get("SGLPERF_EXAMPLE_OUTPUT_LEN", "64")),
    concurrency=[1],
    warmup=1,
    repeats=int(os.environ.get("SGLPERF_EXAMPLE_REPEATS", "6")),
)


@pytest.mark.sglang(DEPLOYMENT)
def test_short_answers_do_not_regress(sglang_measure: Callable[..., MeasurementRecord]) -> None:
    record = sglang_measure(SHORT_ANSWERS, concurrency=1)
    assert record.summary["decode_tok_s"].median > 0
    assert_baseline(record)  # same verdicts and messages as the built-in items
