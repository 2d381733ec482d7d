"""The stated load is the measured load, through the whole plugin on the emulator (SGLang 0.5.23's resolution):
concurrency 4 over 2 prompts keeps 4 in flight, cycling them, and says so in its record and progress line;
a concurrency 4 the server never ran (answers shorter than the prefills queued one at a time before them)
fails naming both numbers, where it used to read as measured. The arithmetic: tests/unit/test_stated_load.py."""

from __future__ import annotations

import json

import pytest

from sglperf.baselines import store

from ..support.emulator_runs import Suite
from ..support.project import SglangPython

# Measures through a server: runs alone under pytest-xdist (tests/conftest.py). Long (ci/selftest-long.sh):
# .ci/run keeps the meter's cycling against the emulator's own batch lines (test_meter_emulator) and the
# plan, the refusals and the in-flight verdict as logic (test_stated_load).
pytestmark = [pytest.mark.quiet_host, pytest.mark.long]

pytest_plugins = ["pytester"]

WORKLOADS = """
[[workloads]]
id = "cycled"
prompts = "../data/prompts/chat.jsonl"
max_prompts = 2
output_len = 128
concurrency = [4]
warmup = 1
repeats = 3

[[workloads]]
id = "short-answers"
prompts = "../data/prompts/chat.jsonl"
max_prompts = 4
output_len = 2
concurrency = [4]
warmup = 1
repeats = 3
"""
# One prefill at a time (10-40 ms each for these prompts): a 2-token answer is done before the next request's
# prefill is, so short-answers never has 4 running; cycled's 128 tokens outlast its 4 prefills.
PREFILL_SLOTS = 1


@pytest.fixture
def suite(pytester: pytest.Pytester, sglang_python: SglangPython, monkeypatch: pytest.MonkeyPatch) -> Suite:
    return Suite.in_project(pytester, sglang_python, monkeypatch, WORKLOADS)


def test_concurrency_4_over_2_prompts_runs_4_in_flight_and_a_point_never_reached_fails(suite: Suite) -> None:
    # It checks what the rounds sent and ran, not how fast: a busy host must not refuse them.
    run = suite("--baseline-missing=skip", "--max-host-load=1", "-s", prefill_slots=PREFILL_SLOTS)
    run.assert_outcomes(skipped=1, failed=1)
    said = run.stdout.str()
    assert "3 rounds of 4 requests cycling 2 prompts, 4 in flight, 128 tokens each" in said, said
    assert suite.results is not None
    records = suite.results / "measurements"

    cycled = json.loads((records / "qwen36-mtp3-prefill-graph-cycled-c4.json").read_text())
    assert cycled["sends"] == {"requests": 4, "prompts": 2, "in_flight": 4}
    assert cycled["problems"] == [] and cycled["concurrency"] == 4
    assert [r["requests"] for r in cycled["result"]["rounds"]] == [4, 4, 4]
    assert any(n.startswith("prompts cycled: each round sends 4 requests over 2 prompts") for n in cycled["notes"])
    # SGLang's side, from the emulator's batch lines of the measured rounds: 4 running at once.
    assert max(r["max_running_req"] for r in cycled["batches"]["rounds"]) == 4

    short = json.loads((records / "qwen36-mtp3-prefill-graph-short-answers-c4.json").read_text())
    assert short["sends"] == {"requests": 4, "prompts": 4, "in_flight": 4}
    reached = max(r["max_running_req"] or 0 for r in short["batches"]["rounds"])
    assert reached < 4
    (problem,) = [p for p in short["problems"] if "ran fewer in flight than it states" in p]
    assert problem.startswith(
        f"short-answers at concurrency 4 ran fewer in flight than it states: SGLang's batch lines in 3 measured "
        f"rounds show at most {reached} running, not 4; up to "
    ), problem
    run.stdout.fnmatch_lines(["*qwen36-mtp3-prefill-graph-short-answers-c4*", "*ran fewer in flight than it states*"])

    # Recording: the point that never ran its load gets no baseline; the cycled one does.
    recorded = suite("--update-baselines", "--max-host-load=1", prefill_slots=PREFILL_SLOTS)
    recorded.assert_outcomes(passed=1, failed=1)
    baseline = suite.path / "baselines" / "emulator" / "2xA6000" / "qwen36" / "mtp3-prefill-graph.json"
    entries = store.load(baseline).entries
    assert "cycled@c4" in entries and "short-answers@c4" not in entries
    assert entries["cycled@c4"].schedule == "4 requests cycling 2 prompts, 4 in flight"
