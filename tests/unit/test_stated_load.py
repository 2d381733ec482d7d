"""The stated load is the measured load: what a round sends at each load point (`Workload.round_plan`), the
load points refused when the deployment loads, one key per load point, and the measured rounds' batch lines
held against the batch preflight judged the graphs for (the meter sending the plan to the emulator:
tests/integration/test_meter_emulator.py; through the whole plugin: tests/sglang/test_stated_load_e2e.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglperf.judge import batch_evidence, coverage
from sglperf.model.batch_evidence import BatchEvidence, RoundBatches
from sglperf.model.deployment_file import DeploymentError, load
from sglperf.model.graph_coverage import WorkloadBatch, graph_needs
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.workload import LoadPoint, RoundPlan, Workload
from sglperf.runtime.gpus import Inventory
from sglperf.scaffold import InitRequest, init

from ..support.project import QWEN36, ROOT


def _workload(**fields: object) -> Workload:
    return Workload.model_validate({"id": "w", "prompts": "p.jsonl", **fields})


# --- what a round sends ---


def test_a_closed_loop_round_cycles_its_prompts_to_keep_its_concurrency_in_flight() -> None:
    chat = _workload(concurrency=[1, 8, 32])
    # init's four starter prompts at c32: 32 requests, each prompt 8 times (before: 4 requests, 4 in flight).
    assert chat.round_plan(LoadPoint(32), 4) == RoundPlan(requests=32, prompts=4, in_flight=32)
    assert chat.round_plan(LoadPoint(32), 4).cycled
    # 12 prompts at 8: the second wave full too (16 requests), not 4 in flight.
    assert chat.round_plan(LoadPoint(8), 12) == RoundPlan(requests=16, prompts=12, in_flight=8)
    # Whole waves already: each prompt once, as before.
    assert chat.round_plan(LoadPoint(1), 4) == RoundPlan(requests=4, prompts=4, in_flight=1)
    assert chat.round_plan(LoadPoint(8), 16) == RoundPlan(requests=16, prompts=16, in_flight=8)
    assert not chat.round_plan(LoadPoint(8), 16).cycled
    assert all(chat.unheld(point, 4) is None for point in chat.load_points())


def test_a_closed_loop_that_may_not_repeat_a_prompt_is_refused_where_its_prompts_cannot_hold_the_load() -> None:
    strict = _workload(concurrency=[1, 8], cycle_prompts=False)
    assert strict.round_plan(LoadPoint(8), 4) == RoundPlan(requests=4, prompts=4, in_flight=4)
    field, line = strict.unheld(LoadPoint(8), 4) or ("", "")
    assert field == "cycle_prompts"
    assert line == (
        "concurrency 8 is not held: with cycle_prompts = false a round sends each of its 4 prompts once, so at most "
        "4 are ever in flight; remove cycle_prompts = false (prompts sent again, in turn), add prompts, or lower "
        "the concurrency"
    )
    # 12 prompts at 8: a last wave of 4. A max_prompts that holds every concurrency is named.
    field, line = strict.unheld(LoadPoint(8), 12) or ("", "")
    assert field == "cycle_prompts"
    assert "its last 4 requests run with fewer than 8 in flight; set max_prompts = 8, " in line
    assert strict.unheld(LoadPoint(1), 4) is None and strict.unheld(LoadPoint(8), 16) is None


def test_an_open_loop_round_must_send_enough_requests_to_reach_its_cap() -> None:
    per_prompt = _workload(rate=2.0, max_concurrency=16)
    (point,) = per_prompt.load_points()
    assert per_prompt.round_plan(point, 11) == RoundPlan(requests=11, prompts=11, in_flight=11)
    assert per_prompt.unheld(point, 11) == (
        "max_concurrency",
        "max_concurrency 16 is never reached: a round sends 11 requests, one per prompt; set requests = 16 or more "
        "(the prompts are taken in turn), or lower max_concurrency",
    )
    counted = _workload(rate=2.0, max_concurrency=16, requests=16)
    assert counted.unheld(point, 11) is None
    assert counted.round_plan(point, 11) == RoundPlan(requests=16, prompts=11, in_flight=16)
    timed = _workload(rate=2.0, duration_s=2.0, max_concurrency=8)
    (point,) = timed.load_points()
    field, line = timed.unheld(point, 11) or ("", "")
    assert field == "max_concurrency"
    assert "a round sends about 4 requests (duration_s 2 at 2 req/s); lengthen duration_s to at least 4 s" in line
    assert timed.unheld(point, 11, scheduled=8) is None  # the meter's exact count of the schedule's sends
    # No cap: nothing to reach.
    assert _workload(rate=2.0).unheld(LoadPoint(None, 2.0), 1) is None


def test_a_cycled_closed_loop_is_part_of_what_a_baseline_must_match() -> None:
    chat = _workload(concurrency=[1, 8])
    assert chat.schedule() == ""  # unchanged: each prompt once
    assert chat.schedule(chat.round_plan(LoadPoint(8), 8)) == ""
    # A baseline recorded when c8 over 4 prompts ran 4 in flight is not this load: the schedules differ.
    assert chat.schedule(chat.round_plan(LoadPoint(8), 4)) == "8 requests cycling 4 prompts, 8 in flight"


# --- refused when the deployment loads: one line, naming file, workload, field and what to change ---


def _qwen36(deployment_dir: Path, old: str, new: str) -> Path:
    path = deployment_dir / "deployments" / "qwen36.toml"
    text = QWEN36.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    return path


DECODE_CHAT = "max_prompts = 4\noutput_len = 256\nconcurrency = [1, 8]\n"


def test_qwen36s_concurrency_8_over_4_prompts_loads_and_runs_8_in_flight(deployment_dir: Path) -> None:
    deployment = load(_qwen36(deployment_dir, "", ""))
    chat = deployment.workloads[0]
    assert chat.id == "decode-chat" and chat.round_plan(LoadPoint(8), 4) == RoundPlan(
        requests=8, prompts=4, in_flight=8
    )
    # What preflight holds the decode graph against is that plan's batch.
    assert [(b.workload, b.tag, b.batch) for b in graph_needs(deployment).batches][:2] == [
        ("decode-chat", "c1", 1),
        ("decode-chat", "c8", 8),
    ]


def test_a_concurrency_its_prompts_cannot_hold_without_repeats_is_refused_at_load(deployment_dir: Path) -> None:
    path = _qwen36(deployment_dir, DECODE_CHAT, DECODE_CHAT + "cycle_prompts = false\n")
    with pytest.raises(DeploymentError) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        f"{path}: workloads[0].cycle_prompts (workload 'decode-chat'): concurrency 8 is not held: with "
        "cycle_prompts = false a round sends each of its 4 prompts once, so at most 4 are ever in flight"
    ), message


def test_a_rate_whose_rounds_cannot_reach_max_concurrency_is_refused_at_load(deployment_dir: Path) -> None:
    path = _qwen36(deployment_dir, "requests = 16\nmax_concurrency = 8", "requests = 4\nmax_concurrency = 8")
    with pytest.raises(DeploymentError) as info:
        load(path)
    assert str(info.value) == (
        f"{path}: workloads[3].max_concurrency (workload 'chat-at-rate'): max_concurrency 8 is never reached: a "
        "round sends requests = 4; set requests = 8 or more, or lower max_concurrency"
    )


def test_synthetic_prompts_are_counted_at_load_too(deployment_dir: Path) -> None:
    path = _qwen36(
        deployment_dir,
        'prompts = "../data/prompts/chat.jsonl"\nmax_prompts = 4\n',
        'synthetic = { kind = "random", count = 6, input_len = 64 }\ncycle_prompts = false\n',
    )
    with pytest.raises(DeploymentError) as info:
        load(path)
    assert "workloads[0].cycle_prompts (workload 'decode-chat'): concurrency 8 is not held" in str(info.value)
    assert "at most 6 are ever in flight" in str(info.value)


# --- one key per load point ---


def test_two_workloads_with_one_id_are_refused_naming_both(deployment_dir: Path) -> None:
    path = _qwen36(deployment_dir, 'id = "decode-code"', 'id = "decode-chat"')
    with pytest.raises(DeploymentError) as info:
        load(path)
    assert (
        "workloads[1].id: 'decode-chat' is also workloads[0].id: the two would share test ids, results files and "
        "baseline entries, the later measurement overwriting the earlier; rename one"
    ) in str(info.value)


def test_a_concurrency_listed_twice_is_refused(deployment_dir: Path) -> None:
    path = _qwen36(deployment_dir, "concurrency = [1, 8]", "concurrency = [8, 1, 8]")
    with pytest.raises(DeploymentError) as info:
        load(path)
    assert "workloads[0].concurrency: concurrency 8 is listed twice" in str(info.value)


def test_capacity_rates_that_read_alike_are_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("capacity rates 0.1234567 and 0.1234568 are one load point")):
        _workload(capacity={"rates": [0.1234567, 0.1234568, 1.0]}, slo={"ttft_s": 1.0}, repeats=8)


# --- the measured rounds against the batch the point states ---


def _evidence(*running: int | None, queued: int = 0) -> BatchEvidence:
    rounds = [
        RoundBatches(
            round=i, prefill=1, prefill_graph=0, decode=4, decode_graph=4, max_running_req=r, max_queue_req=queued
        )
        for i, r in enumerate(running)
    ]
    return BatchEvidence(log="server.log", decode_log_interval=8, graph_label="cuda graph", rounds=rounds)


def _need(concurrency: int, max_running: int | None = None) -> WorkloadBatch:
    fields = {} if max_running is None else {"max_running_requests": max_running}
    need = coverage.measured_batch(_workload(concurrency=[concurrency]), LoadPoint(concurrency), 4, fields)
    assert need is not None
    return need


def test_a_closed_loop_whose_server_never_ran_its_concurrency_fails_naming_both_numbers() -> None:
    problems, notes = batch_evidence.judge_in_flight(_evidence(4, 3, None), _need(32), open_loop=False)
    assert notes == []
    assert problems == [
        "w at concurrency 32 ran fewer in flight than it states: SGLang's batch lines in 3 measured rounds show at "
        "most 4 running, not 32; none waited in its queue: the requests did not overlap (answers shorter than a "
        "wave's prefills); the decode batch preflight judged the graphs for never ran, so these numbers are not "
        "batch 32's"
    ]
    (queued,) = batch_evidence.judge_in_flight(_evidence(4, queued=28), _need(32), open_loop=False)[0]
    assert "up to 28 waited in its queue: the server held them back" in queued
    # Reached in any round: held. Capped by the server's max_running_requests: held at the cap.
    assert batch_evidence.judge_in_flight(_evidence(4, 32), _need(32), open_loop=False) == ([], [])
    assert batch_evidence.judge_in_flight(_evidence(16, 16), _need(32, max_running=16), open_loop=False) == ([], [])
    # No line counted running requests: nothing proven here (judge() notes the log).
    assert batch_evidence.judge_in_flight(_evidence(None), _need(32), open_loop=False) == ([], [])


def test_an_open_loop_that_never_reaches_its_cap_is_a_note() -> None:
    problems, (note,) = batch_evidence.judge_in_flight(_evidence(2, 3), _need(8), open_loop=True)
    assert problems == [] and "never the 8 preflight judged the decode graph for" in note


def test_the_record_keeps_what_each_round_sent() -> None:
    fields = MeasurementRecord.model_fields
    assert fields["sends"].annotation == RoundPlan | None and fields["sends"].default is None


# --- what `init` proposes, its prompts hold ---


def test_init_proposes_only_loads_its_starter_prompts_hold_and_a_concurrency_added_later_cycles_them(
    tmp_path: Path,
) -> None:
    # init proposes concurrency [1] over its 4 starter prompts: held with each prompt once a round (more
    # prompts would make every c1 round longer, the first emulator run included). The c32 was added by
    # hand: it runs 32 in flight, cycling the 4 prompts (the record says so), or is refused at load when the
    # workload forbids repeats.
    request = InitRequest(
        model=ROOT / "tests" / "data" / "hf-configs" / "Llama-3.1-8B-Instruct",
        root=tmp_path,
        gpu_count=1,
        gpu_name="NVIDIA L40S",
        memory_gib=48.0,
        compute_capability="8.9",
    )
    path = init(request, inventory=lambda: Inventory((), "none")).deployment
    prompts = len((tmp_path / "prompts" / "chat.jsonl").read_text().splitlines())
    for workload in load(path).workloads:
        for point in workload.load_points():
            plan = workload.round_plan(point, workload.prompts_used(prompts))
            assert not plan.cycled and plan.in_flight == point.concurrency, (workload.id, point, plan)
    text = path.read_text()
    assert "concurrency = [1]\n" in text
    path.write_text(text.replace("concurrency = [1]\n", "concurrency = [1, 32]\n"))
    (chat,) = load(path).workloads
    assert chat.round_plan(LoadPoint(32), prompts) == RoundPlan(requests=32, prompts=4, in_flight=32)
    path.write_text(text.replace("concurrency = [1]\n", "concurrency = [1, 32]\ncycle_prompts = false\n"))
    with pytest.raises(DeploymentError, match=r"concurrency 32 is not held: .* at most 4 are ever in flight"):
        load(path)


def test_two_measurements_meeting_on_one_key_are_refused_at_load(tmp_path: Path) -> None:
    """Found while building the stated load: variant 'mtp3' with workload 'full-decode' and variant 'mtp3-full'
    with workload 'decode' both measured into 'x-mtp3-full-decode-c1', the later overwriting the earlier."""
    from sglperf.model.deployment_file import DeploymentError, load

    from ..support.project import ROOT

    path = tmp_path / "x.toml"
    path.write_text(
        f"""
[model]
key = "x"
served_path = "/m"
config = "{ROOT / "models" / "tiny-qwen3" / "config.json"}"
[runner]
name = "r"
gpu_count = 1
gpu_name = "NVIDIA L40S"
compute_capability = "8.9"
memory_gib = 48
[launch]
tp_size = 1
[[variants]]
id = "mtp3"
[[variants]]
id = "mtp3-full"
[[workloads]]
id = "full-decode"
prompts = "{ROOT / "data" / "prompts" / "chat.jsonl"}"
[[workloads]]
id = "decode"
prompts = "{ROOT / "data" / "prompts" / "chat.jsonl"}"
"""
    )
    with pytest.raises(DeploymentError) as raised:
        load(path)
    assert "both measure into 'x-mtp3-full-decode-c1'" in str(raised.value)
