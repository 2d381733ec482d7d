"""`sglperf.judge.live_evidence`: live verdicts from hand-built server facts (no server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sglperf.judge import live_evidence
from sglperf.model.checkpoint import CheckpointFacts
from sglperf.model.graph_coverage import CapturedSizes, WorkloadBatch
from sglperf.model.resolution import LogLine, ModelFacts, Write
from sglperf.model.server_facts import ServerFacts
from sglperf.model.verdict import Status, Verdict
from sglperf.sglang.intents import SpeculativeSettings

from ..support.project import QWEN36_CONFIG

CONFIG: dict[str, Any] = json.loads(QWEN36_CONFIG.read_text())
TP = 2
SIZE = CheckpointFacts(CONFIG).size()
TEXT_ONLY = SIZE.weight_gib_per_gpu(TP, vision=False, vision_replicated=False)
WITH_VISION = SIZE.weight_gib_per_gpu(TP, vision=True, vision_replicated=False)
SPEC = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3,
    "speculative_num_draft_tokens": 4,
    "speculative_eagle_topk": 1,
}


def graph_args(prefill: str = "breakable", decode: str = "full") -> dict[str, Any]:
    """0.5.23-style effective args: one nested backend per phase."""
    return {"cuda_graph_config": {"prefill": {"backend": prefill}, "decode": {"backend": decode}}}


def facts(effective: dict[str, Any], memory: dict[str, Any] | None = None, *, emulated: bool = False) -> ServerFacts:
    states = ({"memory_usage": memory},) if memory is not None else ()
    return ServerFacts("http://127.0.0.1:30000", "0.5.23", effective, states, {}, emulated)


def check_one(intent: str, expected: Any, server: ServerFacts, log: str = "", **kwargs: Any) -> Verdict:
    (verdict,) = live_evidence.check(
        "qwen36", "mtp3-full", {intent: expected}, server, log, config=CONFIG, tp=TP, **kwargs
    )
    return verdict


def test_sizes_from_the_real_config_are_far_enough_apart_to_tell() -> None:
    # The vision tests below only mean something if text-only and with-vision differ clearly.
    assert WITH_VISION - TEXT_ONLY > 0.3
    assert 20 < TEXT_ONLY < 30


# -- prefill CUDA graph ---------------------------------------------------------------------------


def test_prefill_graph_on_in_args_but_never_captured_fails() -> None:
    server = facts(graph_args(), {"weight": TEXT_ONLY, "graph": {"decode": 1.1, "prefill": 0.0}})
    v = check_one("prefill_cuda_graph", True, server)
    assert v.status == Status.FAIL
    assert v.actual == "on in args, no graph captured"
    assert v.detail == (
        "read from cuda_graph_config.prefill.backend = 'breakable'; but "
        "internal_states[0].memory_usage.graph.prefill = 0.00 GB: the prefill CUDA graph was never captured"
    )
    assert v.tier == "live"


def test_prefill_graph_captured_passes_with_the_evidence() -> None:
    server = facts(graph_args(), {"weight": TEXT_ONLY, "graph": {"decode": 1.1, "prefill": 0.85}})
    v = check_one("prefill_cuda_graph", True, server)
    assert v.status == Status.PASS
    assert v.actual == "on"
    assert v.detail == (
        "read from cuda_graph_config.prefill.backend = 'breakable'; "
        "internal_states[0].memory_usage.graph.prefill = 0.85 GB"
    )


def test_prefill_graph_expected_off_with_no_graph_memory_stays_a_pass() -> None:
    server = facts(graph_args(prefill="disabled"), {"graph": {"decode": 1.1, "prefill": 0.0}})
    v = check_one("prefill_cuda_graph", False, server)
    assert v.status == Status.PASS
    assert v.detail.endswith("graph.prefill = 0.00 GB")


def test_prefill_graph_off_in_args_is_a_fail_whatever_the_memory_says() -> None:
    server = facts(graph_args(prefill="disabled"), {"graph": {"decode": 1.1, "prefill": 0.5}})
    v = check_one("prefill_cuda_graph", True, server)
    assert v.status == Status.FAIL and v.actual == "off"


@pytest.mark.parametrize("memory", [None, {"weight": 25.0}, {"graph": {"decode": 1.0}}, {"graph": "n/a"}])
def test_release_without_per_phase_graph_memory_says_so(memory: dict[str, Any] | None) -> None:
    v = check_one("prefill_cuda_graph", True, facts(graph_args(), memory))
    assert v.status == Status.PASS
    assert v.reasons[-1] == "no per-phase graph memory on this release (0.5.17+ reports it)"
    assert "memory_usage.graph" not in v.detail


def test_an_error_gets_no_live_evidence() -> None:
    server = facts({"some_other_field": 1}, {"graph": {"prefill": 0.0}})
    v = check_one("prefill_cuda_graph", True, server)
    assert v.status == Status.ERROR
    assert v.detail.startswith("cannot read prefill_cuda_graph from SGLang 0.5.23's effective args")
    assert "graph.prefill" not in v.detail and v.reasons == ()


def test_emulated_server_is_its_own_tier_and_requested_and_warnings_pass_through() -> None:
    server = facts(graph_args(prefill="disabled"), {"graph": {"prefill": 0.0}}, emulated=True)
    v = check_one("prefill_cuda_graph", True, server, requested=("prefill_cuda_graph",), warnings=("w1",))
    assert v.tier == "live (emulator)"
    assert "you asked for it, but SGLang overrode the request" in v.detail
    assert v.warnings == ("w1",)


def test_every_expectation_gets_one_verdict_in_order() -> None:
    server = facts({**graph_args(), **SPEC}, {"graph": {"prefill": 1.0}})
    verdicts = live_evidence.check(
        "qwen36",
        "mtp1",
        {
            "decode_cuda_graph": True,
            "prefill_cuda_graph": True,
            "speculative": SpeculativeSettings("NEXTN", num_steps=3, num_draft_tokens=4, eagle_topk=1),
            "single_batch_overlap": True,
        },
        server,
        "",
        config=CONFIG,
        tp=TP,
    )
    assert [(v.intent, v.status) for v in verdicts] == [
        ("decode_cuda_graph", Status.PASS),
        ("prefill_cuda_graph", Status.PASS),
        ("speculative", Status.PASS),  # NEXTN is compared as the EAGLE SGLang rewrites it to
        ("single_batch_overlap", Status.ERROR),  # not in these effective args
    ]


# -- vision weights -------------------------------------------------------------------------------


def test_vision_flag_and_text_only_weight_memory_passes() -> None:
    v = check_one("vision_weights_skipped", True, facts({"language_model_only": True}, {"weight": TEXT_ONLY}))
    assert v.status == Status.PASS
    assert v.actual == "skipped (weight memory)"
    assert "vision tower skipped" in v.detail
    assert f"weights {TEXT_ONLY:.2f} GiB/GPU" in v.detail


def test_vision_flag_but_tower_loaded_fails() -> None:
    v = check_one("vision_weights_skipped", True, facts({"language_only": True}, {"weight": WITH_VISION}))
    assert v.status == Status.FAIL
    assert v.actual == "flag set, but the vision tower was loaded"
    assert "vision tower loaded" in v.detail


def test_no_flag_and_tower_loaded_fails_as_loaded() -> None:
    v = check_one("vision_weights_skipped", True, facts({}, {"weight": WITH_VISION}))
    assert v.status == Status.FAIL
    assert v.actual == "loaded (weight memory)"


def test_vision_expected_loaded_and_loaded_passes() -> None:
    v = check_one("vision_weights_skipped", False, facts({}, {"weight": WITH_VISION}))
    assert v.status == Status.PASS and v.actual == "loaded"


def test_no_weight_memory_leaves_it_unproven() -> None:
    v = check_one("vision_weights_skipped", True, facts({"language_model_only": True}, {"graph": {"prefill": 1.0}}))
    assert v.status == Status.UNPROVEN
    assert v.detail.endswith("; the server reports no weight memory")


def test_no_weight_memory_keeps_a_failure_a_failure() -> None:
    v = check_one("vision_weights_skipped", True, facts({}, None))
    assert v.status == Status.FAIL
    assert v.detail.endswith("; the server reports no weight memory")


def test_weight_memory_far_from_every_expectation_is_unproven() -> None:
    v = check_one("vision_weights_skipped", True, facts({"language_model_only": True}, {"weight": TEXT_ONLY * 2}))
    assert v.status == Status.UNPROVEN and v.actual == "unclear"


def test_the_mtp_layer_is_counted_when_the_server_runs_speculative_decoding() -> None:
    # Between text-only and with-vision without MTP, but text-only once the MTP layer is counted.
    measured = SIZE.weight_gib_per_gpu(TP, vision=False, vision_replicated=False, mtp=True)
    plain = check_one("vision_weights_skipped", True, facts({"language_model_only": True}, {"weight": measured}))
    mtp = check_one("vision_weights_skipped", True, facts({"language_model_only": True, **SPEC}, {"weight": measured}))
    assert plain.status == Status.FAIL
    assert mtp.status == Status.PASS
    assert "(incl. MTP layer)" in mtp.detail


def test_a_config_that_cannot_be_sized_says_so() -> None:
    (v,) = live_evidence.check(
        "qwen36",
        "mtp3-full",
        {"vision_weights_skipped": True},
        facts({"language_model_only": True}, {"weight": TEXT_ONLY}),
        "",
        config={"model_type": "qwen3_5"},
        tp=TP,
    )
    assert "cannot size the model from config.json: config.json: cannot count parameters" in v.detail
    assert v.status == Status.UNPROVEN


def built(vision_tower: str | None) -> ModelFacts:
    """The model class as preflight built it for the same variant."""
    return ModelFacts(
        architecture="Qwen3_5ForConditionalGeneration",
        vision_tower=vision_tower,
        moe_layers=0,
        param_bytes_per_rank=27_000_000_000,
        vision_param_bytes_per_rank=460_000_000 if vision_tower else 0,
    )


@pytest.mark.parametrize(
    ("weight", "status", "actual", "says"),
    [
        (TEXT_ONLY, Status.PASS, "skipped (weight memory)", "vision tower skipped"),
        (WITH_VISION, Status.FAIL, "flag set, but the vision tower was loaded", "vision tower loaded"),
        (TEXT_ONLY * 2, Status.PASS, "on", "weight memory cannot tell: weights"),
        (None, Status.PASS, "on", "the server reports no weight memory"),
    ],
)
def test_with_the_model_class_proven_weight_memory_confirms_or_wins(
    weight: float | None, status: Status, actual: str, says: str
) -> None:
    memory = {"weight": weight} if weight is not None else {}
    v = check_one(
        "vision_weights_skipped", True, facts({"language_model_only": True}, memory), model=built(vision_tower=None)
    )
    assert (v.status, v.actual) == (status, actual)
    assert v.detail.startswith("read from SGLang's model class Qwen3_5ForConditionalGeneration")
    assert says in v.detail


def test_an_inert_flag_with_the_tower_loaded_stays_inert_with_the_evidence() -> None:
    v = check_one(
        "vision_weights_skipped",
        True,
        facts({"language_only": True}, {"weight": WITH_VISION}),
        model=built("Qwen3_VisionTransformer"),
    )
    assert v.status == Status.INERT
    assert v.detail.startswith("--language-only set, but SGLang's model class")
    assert v.detail.endswith("-> vision tower loaded")


# -- server log -----------------------------------------------------------------------------------

LOG = """\
# sglperf: launched python -m sglang.launch_server --enable-piecewise-cuda-graph
[2026-01-01 10:00:00] INFO model_runner.py: Load weight end.
[2026-01-01 10:00:01] WARNING server_args.py: Disabling piecewise CUDA graph for multimodal models.
  a continuation line without level
[2026-01-01 10:00:02] ERROR scheduler.py: boom
"""


def test_parse_log_strips_terminal_colours() -> None:
    (line,) = live_evidence.parse_log("\x1b[33m[2026-01-01] WARNING\x1b[0m piecewise cuda graph off\x1b[K  ")
    assert line == LogLine("WARNING", "server-log", "[2026-01-01] WARNING piecewise cuda graph off")


def test_parse_log_drops_our_own_notes_and_picks_the_level() -> None:
    assert live_evidence.parse_log(LOG) == (
        LogLine("INFO", "server-log", "[2026-01-01 10:00:00] INFO model_runner.py: Load weight end."),
        LogLine(
            "WARNING",
            "server-log",
            "[2026-01-01 10:00:01] WARNING server_args.py: Disabling piecewise CUDA graph for multimodal models.",
        ),
        LogLine("INFO", "server-log", "a continuation line without level"),
        LogLine("ERROR", "server-log", "[2026-01-01 10:00:02] ERROR scheduler.py: boom"),
    )


def test_server_log_lines_about_the_intent_become_reasons() -> None:
    server = facts(graph_args(prefill="disabled"), {"graph": {"prefill": 0.0}})
    v = check_one("prefill_cuda_graph", True, server, LOG)
    assert v.reasons == (
        "SGLang log [WARNING] [2026-01-01 10:00:01] WARNING server_args.py: Disabling piecewise CUDA graph "
        "for multimodal models.",
    )


def test_the_captured_decode_sizes_are_held_against_the_workloads_with_preflights_rule() -> None:
    """Live coverage uses what the server captured (SGLang trims the sizes to its request pool at start-up),
    and quotes preflight's rule when the server's largest size is the one preflight predicted."""
    server = ServerFacts(
        "http://127.0.0.1:30000", "0.5.23", graph_args(), ({"decode_cuda_graph_bs": [1, 2, 4, 8]},), {}, False
    )
    rule = Write("cuda_graph_config.decode.max_bs", 8, "handle_gpu_memory_settings", "memory_hook.py:85")
    wanted = live_evidence.LiveCoverage(
        [WorkloadBatch("chat", "concurrency 4", 4), WorkloadBatch("wide", "concurrency 16", 16)],
        CapturedSizes((1, 2, 4, 8), "cuda_graph_config.decode.bs", rule),
    )
    verdict = check_one("decode_cuda_graph", True, server, graph_coverage=wanted)
    assert verdict.status == Status.FAIL and verdict.actual == "on, up to batch 8: eager above"
    (line,) = verdict.detail.splitlines()[1:]
    assert line.strip().startswith(
        "wide at concurrency 16 decodes eager: SGLang 0.5.23 captures the decode graph up to batch 8, below the "
        "workload's 16, set by handle_gpu_memory_settings (memory_hook.py:85); raise it: request"
    )
    # Trimmed by the server below what preflight predicted: the server's sizes count, preflight's rule does not.
    predicted_more = live_evidence.LiveCoverage(wanted.batches, CapturedSizes((1, 16), "x", rule))
    verdict = check_one("decode_cuda_graph", True, server, graph_coverage=predicted_more)
    assert "read from internal_states[0].decode_cuda_graph_bs" in verdict.detail
    covered = live_evidence.LiveCoverage([WorkloadBatch("chat", "concurrency 4", 4)])
    verdict = check_one("decode_cuda_graph", True, server, graph_coverage=covered)
    assert verdict.status == Status.PASS and verdict.actual == "on, up to batch 8"


def test_the_vision_intent_on_a_text_only_model_is_not_applicable_live_too() -> None:
    (v,) = live_evidence.check(
        "tiny",
        "plain",
        {"vision_weights_skipped": True},
        facts({}, {"weight": TEXT_ONLY}),
        "",
        config={"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"},
        tp=TP,
    )
    assert v.status == Status.INERT and v.actual == "not applicable", v
    assert v.detail.startswith("not applicable: Qwen3ForCausalLM is text-only")
