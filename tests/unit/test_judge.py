"""`sglperf.judge.intent` and `sglperf.judge.divergence` on hand-built effective args (no SGLang)."""

from __future__ import annotations

from typing import Any

from sglperf.judge import divergence as divergence_mod
from sglperf.judge.intent import MAX_REASONS, explain, is_about, judge, judge_error
from sglperf.model.resolution import EffectiveArgs, LogLine, ModelFacts, SGLangError, Write
from sglperf.model.verdict import Status
from sglperf.sglang.intents import INTENTS, SpeculativeSettings

PREFILL = INTENTS["prefill_cuda_graph"]
VISION = INTENTS["vision_weights_skipped"]
OVERLAP = INTENTS["single_batch_overlap"]
SPECULATIVE = INTENTS["speculative"]
HINT = "ask for it: request = { prefill_cuda_graph = true } in the variant"


def graph_config(prefill: str, decode: str = "full") -> dict[str, Any]:
    return {"prefill": {"backend": prefill}, "decode": {"backend": decode}}


ASKED = Write(
    "cuda_graph_config",
    graph_config("breakable"),
    rule="ServerArgs.__init__",
    where="server_args.py:100",
    comment="from the command line",
)
OVERRIDDEN = Write(
    "cuda_graph_config",
    graph_config("disabled"),
    rule="_handle_piecewise_cuda_graph",
    where="server_args.py:2345",
    comment="Disable piecewise CUDA graph for multimodal models",
)
WARNING = LogLine("WARNING", "sglang.srt.server_args", "Disabling piecewise CUDA graph for multimodal models.")
UNRELATED = LogLine("INFO", "sglang.srt.model_runner", "Load weight end. mem usage=25.05 GB")
DECISIVE = (
    "SGLang rule _handle_piecewise_cuda_graph (server_args.py:2345, "
    '"Disable piecewise CUDA graph for multimodal models") '
    "set cuda_graph_config.prefill.backend = 'disabled' (off)"
)


def args(prefill: str, *, writes: tuple[Write, ...] = (), logs: tuple[LogLine, ...] = ()) -> EffectiveArgs:
    return EffectiveArgs({"cuda_graph_config": graph_config(prefill), "port": 30000}, logs, writes)


def test_pass_reads_from_the_effective_field() -> None:
    v = judge("qwen36", "mtp1", PREFILL, True, args("breakable"), "0.5.23", warnings=("w",), tier="live")
    assert v.status == Status.PASS and v.ok is True
    assert (v.expected, v.actual) == ("on", "on")
    assert v.detail == "read from cuda_graph_config.prefill.backend = 'breakable'"
    assert (v.deployment, v.variant, v.intent, v.sglang_version) == ("qwen36", "mtp1", "prefill_cuda_graph", "0.5.23")
    assert (v.warnings, v.tier) == (("w",), "live")


def test_pass_reads_old_boolean_fields_too() -> None:
    v = judge("qwen36", "mtp1", PREFILL, True, EffectiveArgs({"disable_piecewise_cuda_graph": False}), "0.5.13")
    assert v.status == Status.PASS
    assert v.detail == "read from disable_piecewise_cuda_graph = False"


def test_fail_names_the_field_and_the_hint() -> None:
    v = judge("qwen36", "mtp1", PREFILL, True, args("disabled"), "0.5.23", hint=HINT)
    assert v.status == Status.FAIL and v.ok is False
    assert (v.expected, v.actual) == ("on", "off")
    assert v.detail == f"read from cuda_graph_config.prefill.backend = 'disabled'; {HINT}"


def test_fail_without_hint_is_just_the_field() -> None:
    v = judge("qwen36", "mtp1", PREFILL, True, args("disabled"), "0.5.23")
    assert v.detail == "read from cuda_graph_config.prefill.backend = 'disabled'"


def test_fail_when_requested_says_sglang_overrode_it_instead_of_the_hint() -> None:
    v = judge("qwen36", "mtp3-prefill-graph", PREFILL, True, args("disabled"), "0.5.23", requested=True, hint=HINT)
    assert v.status == Status.FAIL
    assert v.detail == (
        "read from cuda_graph_config.prefill.backend = 'disabled'; you asked for it, but SGLang overrode the request"
    )
    assert HINT not in v.detail


def test_fail_carries_the_readings_note() -> None:
    v = judge("qwen36", "mtp1", VISION, False, EffectiveArgs({"language_only": True}), "0.5.23")
    assert v.status == Status.FAIL
    assert v.detail.startswith("read from language_only = True; --language-only is set, but it belongs to")


def test_unprovable_match_is_unproven_never_pass() -> None:
    v = judge("qwen36", "mtp3-full", VISION, True, EffectiveArgs({"language_model_only": True}), "0.5.23")
    assert v.status == Status.UNPROVEN and v.ok is None
    assert v.actual == "on (unproven)"
    assert v.detail.startswith("read from language_model_only = True; the flag is set; only the live tier")


def test_speculative_alias_passes_and_a_different_step_count_fails() -> None:
    fields = {
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 3,
        "speculative_num_draft_tokens": 4,
        "speculative_eagle_topk": 1,
    }
    same = judge("q", "v", SPECULATIVE, SpeculativeSettings("NEXTN", 3, 4, 1), EffectiveArgs(fields), "0.5.23")
    other = judge("q", "v", SPECULATIVE, SpeculativeSettings("NEXTN", 1, 2, 1), EffectiveArgs(fields), "0.5.23")
    assert same.status == Status.PASS
    assert same.expected == "NEXTN (= EAGLE) steps=3 draft=4 topk=1"
    assert same.actual == "EAGLE steps=3 draft=4 topk=1"
    assert other.status == Status.FAIL


def test_reasons_name_the_decisive_rule_with_file_line_and_comment() -> None:
    v = judge("q", "v", PREFILL, True, args("disabled", writes=(ASKED, OVERRIDDEN)), "0.5.23")
    assert v.reasons == (DECISIVE,)


def test_the_rule_that_set_a_passing_value_is_the_reason_for_it() -> None:
    v = judge("q", "v", PREFILL, True, args("breakable", writes=(ASKED,)), "0.5.23")
    assert v.reasons == (
        'SGLang rule ServerArgs.__init__ (server_args.py:100, "from the command line") '
        "set cuda_graph_config.prefill.backend = 'breakable' (on)",
    )


def test_reasons_skip_unchanged_repeated_and_unrelated_writes() -> None:
    writes = (
        ASKED,  # set on, later overridden: not why it is off
        OVERRIDDEN,
        Write("cuda_graph_config", graph_config("disabled"), rule="noop", where="a.py:1", changed=False),
        # Changes the decode part only: the prefill value it implies is the one already explained.
        Write("cuda_graph_config", graph_config("disabled", decode="disabled"), rule="decode_off", where="b.py:2"),
        Write("enable_single_batch_overlap", True, rule="other_intent", where="c.py:3"),
    )
    assert explain(PREFILL, args("disabled", writes=writes), False) == [DECISIVE]


def test_an_unchanged_write_is_never_a_reason() -> None:
    write = Write("cuda_graph_config", graph_config("disabled"), rule="noop", where="a.py:1", changed=False)
    assert explain(PREFILL, args("disabled", writes=(write,)), False) == []


def test_a_write_without_where_or_comment_is_still_a_reason() -> None:
    write = Write("disable_piecewise_cuda_graph", True, rule="_handle_piecewise_cuda_graph")
    reasons = explain(PREFILL, EffectiveArgs({"disable_piecewise_cuda_graph": True}, writes=(write,)), False)
    assert reasons == ["SGLang rule _handle_piecewise_cuda_graph set disable_piecewise_cuda_graph = True (off)"]


def test_an_unreadable_write_is_shown_raw_and_not_decisive() -> None:
    write = Write("cuda_graph_config", {"decode": {"backend": "full"}}, rule="partial")
    assert explain(PREFILL, args("disabled", writes=(write,)), False) == []


def test_only_log_lines_matching_the_intents_keywords_are_reasons() -> None:
    v = judge("q", "v", PREFILL, True, args("disabled", writes=(OVERRIDDEN,), logs=(UNRELATED, WARNING)), "0.5.23")
    assert v.reasons == (
        DECISIVE,
        "SGLang log [WARNING] Disabling piecewise CUDA graph for multimodal models.",
    )
    decode = judge("q", "v", INTENTS["decode_cuda_graph"], True, args("disabled", logs=(WARNING,)), "0.5.23")
    assert decode.reasons == ()  # a prefill warning says nothing about the decode graph


def test_at_most_max_reasons() -> None:
    logs = tuple(LogLine("WARNING", "x", f"piecewise cuda graph note {i}") for i in range(MAX_REASONS + 3))
    v = judge("q", "v", PREFILL, True, args("disabled", writes=(OVERRIDDEN,), logs=logs), "0.5.23")
    assert len(v.reasons) == MAX_REASONS
    assert v.reasons[0] == DECISIVE
    assert v.reasons[-1] == f"SGLang log [WARNING] piecewise cuda graph note {MAX_REASONS - 2}"


def test_sglang_refusal_is_an_error_quoting_its_validation_message() -> None:
    error = SGLangError("ValueError", "Speculative decoding is not compatible with radix cache")
    v = judge("qwen36", "mtp1", PREFILL, True, None, "0.5.13", error=error)
    assert v.status == Status.ERROR and v.ok is False
    assert v.actual is None and v.expected == "on"
    assert v.detail == ("SGLang's validation says: ValueError: Speculative decoding is not compatible with radix cache")
    assert "refused the variant" in v.message()


def test_an_error_wins_over_effective_args_and_missing_args_without_error_is_an_error() -> None:
    error = SGLangError("ValueError", "bad")
    assert judge("q", "v", PREFILL, True, args("breakable"), "0.5.23", error=error).status == Status.ERROR
    v = judge("q", "v", PREFILL, True, None, "0.5.23")
    assert (v.status, v.detail) == (Status.ERROR, "SGLang's validation says: no effective args")


def test_an_unreadable_field_is_an_error_naming_what_was_looked_for() -> None:
    v = judge("q", "v", PREFILL, True, EffectiveArgs({"port": 1}), "0.5.99")
    assert v.status == Status.ERROR and v.actual is None
    assert v.detail == (
        "cannot read prefill_cuda_graph from SGLang 0.5.99's effective args: none of "
        "cuda_graph_config.prefill.backend, disable_piecewise_cuda_graph, enable_piecewise_cuda_graph "
        "in the effective args"
    )
    overlap = judge("q", "v", INTENTS["single_batch_overlap"], True, EffectiveArgs({}), "0.5.23")
    assert overlap.status == Status.ERROR
    assert overlap.detail.endswith("enable_single_batch_overlap not in the effective args")


def test_judge_error_reports_the_message_for_the_intent() -> None:
    message = "deployments/qwen36.toml variant 'mtp1': --enable-piecewise-cuda-graph is not accepted by SGLang 0.5.23"
    v = judge_error("qwen36", "mtp1", "speculative", SpeculativeSettings("NEXTN", 1, 2, 1), "0.5.23", message, "live")
    assert v.status == Status.ERROR
    assert (v.intent, v.expected, v.actual) == ("speculative", "NEXTN (= EAGLE) steps=1 draft=2 topk=1", None)
    assert (v.detail, v.tier, v.sglang_version) == (message, "live", "0.5.23")
    assert judge_error("q", "v", "decode_cuda_graph", False, "0.5.23", "m").expected == "off"


def model(*, vision_tower: str | None = None, moe_layers: int = 0) -> ModelFacts:
    """What preflight's meta-device construction of the model class says it builds."""
    return ModelFacts(
        architecture="Qwen3_5ForConditionalGeneration",
        vision_tower=vision_tower,
        moe_layers=moe_layers,
        param_bytes_per_rank=27_000_000_000,
        vision_param_bytes_per_rank=460_000_000 if vision_tower else 0,
    )


def test_log_lines_naming_the_intents_own_field_or_flag_are_about_it() -> None:
    assert is_about(OVERLAP, "enable_single_batch_overlap is set; overlap runs in MoE layers only")
    assert is_about(OVERLAP, "--enable-single-batch-overlap is ignored together with --disable-overlap-schedule")
    assert is_about(PREFILL, "Disabling piecewise CUDA graph for multimodal models.")
    assert not is_about(PREFILL, "Load weight end. mem usage=25.05 GB")


def test_a_topic_word_in_a_line_about_another_flag_is_not_about_the_intent() -> None:
    line = "Piecewise CUDA graph needs more memory; lower --mem-fraction-static if it fails"
    assert not is_about(PREFILL, line)
    assert not is_about(
        SPECULATIVE, "Max running requests is reset to 48 for speculative decoding is on. Set --max-running-requests"
    )
    assert is_about(SPECULATIVE, "Speculative decoding is on with the EAGLE worker")
    v = judge("q", "v", PREFILL, True, args("disabled", logs=(LogLine("WARNING", "x", line),)), "0.5.23")
    assert v.reasons == ()


def test_inert_when_set_but_the_model_class_builds_nothing_it_acts_on() -> None:
    fields = {"enable_single_batch_overlap": True}
    v = judge("qwen36", "mtp3-full", OVERLAP, True, EffectiveArgs(fields, model=model()), "0.5.23", requested=True)
    assert v.status == Status.INERT and v.status.failed and v.ok is False
    assert v.actual == "inert (set, no effect)"
    assert v.detail.startswith("enable_single_batch_overlap = True, but SGLang reads it only in its MoE layers")
    assert "Qwen3_5ForConditionalGeneration builds none" in v.detail
    moe = judge("q", "v", OVERLAP, True, EffectiveArgs(fields, model=model(moe_layers=48)), "0.5.23")
    assert moe.status == Status.PASS
    unasked = judge("q", "v", OVERLAP, False, EffectiveArgs(fields, model=model()), "0.5.23")
    assert unasked.status == Status.FAIL  # inert is only about what was expected on


def test_overlap_set_without_the_model_class_is_unproven() -> None:
    v = judge("q", "v", OVERLAP, True, EffectiveArgs({"enable_single_batch_overlap": True}), "0.5.23")
    assert v.status == Status.UNPROVEN
    assert "depends on MoE layers" in v.detail


def test_vision_read_from_the_model_class_when_preflight_built_it() -> None:
    skipped = judge("q", "v", VISION, True, EffectiveArgs({"language_model_only": True}, model=model()), "0.5.23")
    assert skipped.status == Status.PASS
    assert skipped.detail == (
        "read from SGLang's model class Qwen3_5ForConditionalGeneration, built on the meta device: vision tower none"
    )
    built = model(vision_tower="Qwen3_VisionTransformer")
    loaded = judge("q", "v", VISION, True, EffectiveArgs({"language_only": True}, model=built), "0.5.23")
    assert loaded.status == Status.INERT
    assert loaded.detail.startswith("--language-only set, but SGLang's model class")
    assert "Qwen3_VisionTransformer, 0.46 GB per GPU" in loaded.detail
    plain = judge("q", "v", VISION, True, EffectiveArgs({}, model=built), "0.5.23")
    assert plain.status == Status.FAIL  # nothing set: not inert, just off


def test_unproven_says_why_the_model_class_was_not_built() -> None:
    args_ = EffectiveArgs({"language_model_only": True}, model_error="RuntimeError: meta tensors " + "x" * 500)
    v = judge("q", "v", VISION, True, args_, "0.5.23")
    assert v.status == Status.UNPROVEN
    assert "(the model class could not be built on the meta device: RuntimeError: meta tensors x" in v.detail
    assert "x" * 200 not in v.detail


def test_caveats_travel_with_the_verdict() -> None:
    caveat = "without the request SGLang decides off: SGLang rule r set x"
    v = judge("q", "v", PREFILL, True, args("breakable"), "0.5.23", caveats=(caveat,))
    assert v.caveats == (caveat,)
    assert f"  caveat: {caveat}" in v.message().splitlines()
    assert v.to_record()["caveats"] == [caveat]


# -- divergence ----------------------------------------------------------------------------------------


def test_divergence_ignores_launch_specific_fields_and_fields_only_one_side_has() -> None:
    live = {"port": 30001, "host": "0.0.0.0", "random_seed": 7, "chunked_prefill_size": 8192, "only_live": 1}
    predicted = {"port": 30000, "host": "127.0.0.1", "random_seed": 1, "chunked_prefill_size": 8192, "only_pred": 2}
    assert divergence_mod.divergence(live, predicted) == divergence_mod.Divergence((), ())


def test_divergence_separates_intent_fields_from_other_fields() -> None:
    live = {
        "cuda_graph_config": graph_config("disabled"),
        "speculative_num_steps": 3,
        "chunked_prefill_size": 4096,
        "attention_backend": "fa3",
        "port": 1,
    }
    predicted = {
        "cuda_graph_config": graph_config("breakable"),
        "speculative_num_steps": 1,
        "chunked_prefill_size": 8192,
        "attention_backend": "fa3",
        "port": 2,
    }
    d = divergence_mod.divergence(live, predicted)
    assert d.intent_fields == ("cuda_graph_config", "speculative_num_steps")
    assert d.other_fields == ("chunked_prefill_size",)


def test_divergence_describe_shows_prediction_and_live_value_intent_fields_first() -> None:
    live = {"chunked_prefill_size": 4096, "enable_single_batch_overlap": False, "big": "x" * 1000}
    predicted = {"chunked_prefill_size": 8192, "enable_single_batch_overlap": True, "big": "y"}
    d = divergence_mod.divergence(live, predicted)
    lines = d.describe(live, predicted)
    assert lines[0] == "enable_single_batch_overlap: predicted True, live False"
    assert lines[1].startswith("big: predicted 'y', live 'xxx")
    assert len(lines[1]) == 300
    assert lines[2] == "chunked_prefill_size: predicted 8192, live 4096"
    assert len(lines) == 3


def test_a_longer_flag_that_starts_like_the_intents_is_not_about_it() -> None:
    decode = INTENTS["decode_cuda_graph"]
    assert not is_about(decode, "Setting --disable-cuda-graph-padding because of the attention backend")
    assert not is_about(decode, "disable_cuda_graph_padding = True")
    assert is_about(decode, "--disable-cuda-graph is set: no decode graph")


def test_the_checkpoint_switch_without_the_model_class_is_unproven_never_overridden() -> None:
    """0.5.21 failed to build the model class for a while: the variant asking for the tower to be dropped
    through the checkpoint's switch read 'you asked for it, but SGLang overrode the request'. Without the
    model class nothing proves either way."""
    fields = {"json_model_override_args": '{"language_model_only": true}', "language_model_only": False}
    v = judge("q", "v", VISION, True, EffectiveArgs(fields, model_error="RuntimeError: no groups"), "0.5.21")
    assert v.status == Status.UNPROVEN
    assert "overrode" not in v.detail and "RuntimeError: no groups" in v.detail


def test_a_nested_write_is_the_rule_of_the_intent_it_sets() -> None:
    """0.5.15's rules set cuda_graph_config.prefill.backend itself (a traced nested write): the walk read 'no
    rule wrote it' where explain named the rule."""
    nested = Write(
        "cuda_graph_config.prefill.backend",
        "disabled",
        rule="_disable_breakable_cudagraph_if_incompatible",
        where="server_args.py:3383",
    )
    reasons = explain(PREFILL, args("disabled", writes=(nested,)), False)
    assert reasons == [
        "SGLang rule _disable_breakable_cudagraph_if_incompatible (server_args.py:3383) set "
        "cuda_graph_config.prefill.backend = 'disabled' (off)"
    ]


def test_an_info_line_is_never_a_reason() -> None:
    info = LogLine("INFO", "sglang.srt.server_args", "Piecewise CUDA graph is disabled.")
    assert explain(PREFILL, args("disabled", logs=(info,)), False) == []
    assert explain(PREFILL, args("disabled", logs=(WARNING,)), False) == [f"SGLang log [WARNING] {WARNING.message}"]
