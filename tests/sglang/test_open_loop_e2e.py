"""A scheduler regression that only load shows, end to end on the emulator as a user runs it: requests
that slow each other down (each decode step longer per request beside it, one prefill at a time) fail
a workload at a request rate on its TTFT tail and goodput, and lower the capacity a capacity search
finds, while the concurrency-1 workload on the same server still passes, and the unchanged emulator
passes them all."""

from __future__ import annotations

import pytest

from sglperf.baselines import store

from ..support.emulator_runs import Suite
from ..support.project import SglangPython

# Measures a server's speed: runs alone under pytest-xdist (tests/conftest.py). Long (ci/selftest-long.sh:
# 1.5-2.5 minutes alone on the host): .ci/run keeps an open-loop workload on the real CPU server
# (tiny-cpu-native's chat-at-rate), the emulator's open loop (test_open_loop) and the capacity search's logic
# (test_capacity).
pytestmark = [pytest.mark.quiet_host, pytest.mark.long]

pytest_plugins = ["pytester"]

WORKLOADS = """
[[workloads]]
id = "single"
prompts = "../data/prompts/chat.jsonl"
max_prompts = 2
output_len = 32
concurrency = [1]
warmup = 1
repeats = 6

[[workloads]]
id = "at-rate"
prompts = "../data/prompts/chat.jsonl"
max_prompts = 2
output_len = 32
rate = 100.0
arrival = "constant"
requests = 12
slo = { ttft_s = 0.06 }
warmup = 1
repeats = 6

[[workloads]]
id = "capacity"
prompts = "../data/prompts/chat.jsonl"
max_prompts = 2
output_len = 32
capacity = { rates = [10.0, 100.0, 200.0] }
arrival = "constant"
requests = 12
slo = { ttft_s = 0.06 }
warmup = 1
repeats = 12
"""
# What the regression does to requests that overlap; a request alone is untouched by either. At 100 req/s
# a request (~20 ms of prefill, ~35 ms of decode) overlaps the next ones: one prefill at a time queues.
STEP_S_PER_RUNNING_REQUEST, PREFILL_SLOTS = 0.004, 1


# Rounds of 0.1-1.2 s: on a VM whose hypervisor steals a CPU for tens of ms now and then, the default
# host-load limit (10%) dropped eight rounds of one item in CI and failed it. What this test judges is
# the verdicts under a load the emulator makes, so a steal burst counts as noise, not as a busy host.
HOST_LOAD = "--max-host-load=0.6"


@pytest.fixture
def suite(pytester: pytest.Pytester, sglang_python: SglangPython, monkeypatch: pytest.MonkeyPatch) -> Suite:
    return Suite.in_project(pytester, sglang_python, monkeypatch, WORKLOADS)


def test_a_rate_workload_fails_on_its_tail_and_goodput_and_the_capacity_falls_where_the_single_stream_passes(
    suite: Suite,
) -> None:
    recorded = suite("--update-baselines", HOST_LOAD)
    recorded.assert_outcomes(passed=6)
    recorded.stdout.fnmatch_lines(["*capacity * req/s*"])
    path = suite.path / "baselines" / "emulator" / "2xA6000" / "qwen36" / "mtp3-prefill-graph.json"
    entry = store.load(path).entries["at-rate@r100"]
    assert entry.rate == 100.0 and entry.schedule == "rate=100 constant seed=0 requests=12 cap=none"
    assert {"ttft_p99_s", "itl_p99_s", "goodput_share", "goodput_req_s"} <= entry.samples.keys()
    assert min(entry.samples["goodput_share"]) == 1.0  # the SLO holds for the unloaded emulator

    loaded = suite(HOST_LOAD, step_s_per_running_request=STEP_S_PER_RUNNING_REQUEST, prefill_slots=PREFILL_SLOTS)
    loaded.assert_outcomes(passed=2, failed=3, skipped=1)
    for line in (
        "*PASSED*qwen36-mtp3-prefill-graph-single-c1*",
        "*FAILED*qwen36-mtp3-prefill-graph-at-rate-r100*",
        "*PASSED*qwen36-mtp3-prefill-graph-capacity-r10*",
        "*FAILED*qwen36-mtp3-prefill-graph-capacity-r100*",
        "*SKIPPED*the capacity search stopped below 200 req/s: 100 req/s: * of 12 rounds kept goodput >= 0.9 (misses*",
        "*FAILED*qwen36-mtp3-prefill-graph-capacity-capacity*",
        # The baseline's capacity from its file, though this run stopped below its highest rate.
        "*capacity fell: capacity 10 req/s (misses at 100 req/s); baseline * req/s*",
    ):
        loaded.stdout.fnmatch_lines([line])
    said = loaded.stdout.str()
    assert "ttft_p99_s regressed" in said and "goodput_share regressed" in said
    assert "sent on schedule (rate=100 constant seed=0 requests=12 cap=none): p90 send lag" in said

    # Last, as it is the one check a busy host can leave unjudged (the skip names the items).
    unchanged = suite.on_a_quiet_host(HOST_LOAD)
    unchanged.assert_outcomes(passed=6)  # a rate with one odd round reads unclear, never as a fall
    unchanged.stdout.fnmatch_lines(["*capacity * req/s*; baseline * req/s*"])
