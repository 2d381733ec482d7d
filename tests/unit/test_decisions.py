"""SGLang's decisions and effective-config diffs: which fields count as decided, by which rule, in
which order, and what a flag changed."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from sglperf.judge.decisions import (
    config_and_model,
    decisions,
    differing_flags,
    field_changes,
    same_value,
)
from sglperf.model.explanation import Explanation, FlagEffect, VariantComparison
from sglperf.model.resolution import FieldChange, ModelFacts, Resolution, Write, shown_value
from sglperf.preflight import probe
from sglperf.reporting.explain import render
from sglperf.sglang.argv import Option, ParserInfo
from sglperf.sglang.config_fields import concern_of, flatten, turns_off

PARSER = ParserInfo(
    "0.5.13",
    {
        "--model-path": Option("model_path"),
        "--tp-size": Option("tp_size", default=1),
        "--chunked-prefill-size": Option("chunked_prefill_size"),
        "--cuda-graph-bs": Option("cuda_graph_bs"),
        "--speculative-algorithm": Option("speculative_algorithm"),
        "--enable-single-batch-overlap": Option("enable_single_batch_overlap", default=False, takes_value=False),
        "--disable-piecewise-cuda-graph": Option("disable_piecewise_cuda_graph", default=False, takes_value=False),
        "--dsa-prefill-backend": Option("dsa_prefill_backend", default="==SUPPRESS=="),
        "--attention-backend": Option("attention_backend"),
    },
)
ARGV = (
    "--model-path",
    "/m",
    "--tp-size",
    "2",
    "--speculative-algorithm",
    "NEXTN",
    "--cuda-graph-bs",
    "1",
    "2",
    "--enable-single-batch-overlap",
)
PIECEWISE_OFF = Write(
    "disable_piecewise_cuda_graph",
    True,
    "_handle_piecewise_cuda_graph",
    "server_args.py:1376",
    "self.disable_piecewise_cuda_graph = True",
    "8. Multimodal / VLM models",
    conditions=("if self.get_model_config().is_multimodal",),
    old=False,
)


def _resolution(effective: dict[str, Any], writes: tuple[Write, ...] = (), argv: tuple[str, ...] = ARGV) -> Resolution:
    return Resolution(argv, {}, effective, writes=writes)


def test_argv_strings_compare_with_resolved_values() -> None:
    assert same_value("4096", 4096) and same_value(["1", "2"], [1, 2]) and same_value("true", True)
    assert not same_value("4096", 8192) and not same_value(["1"], [1, 2]) and not same_value("false", True)
    assert same_value("None", None) and not same_value("x", None)


def test_a_decision_is_a_value_neither_asked_nor_defaulted_and_turned_off_ones_come_first() -> None:
    effective = {
        "model_path": "/m",
        "random_seed": 123,  # names the launch: never a decision
        "tp_size": 2,  # asked and got
        "cuda_graph_bs": [1, 2],  # asked and got
        "speculative_algorithm": "EAGLE",  # asked NEXTN: SGLang overrode the ask
        "chunked_prefill_size": 4096,  # default None, set by a rule
        "attention_backend": None,  # the parser's default: not a decision
        "disable_piecewise_cuda_graph": True,
        "enable_single_batch_overlap": True,
        "dsa_prefill_backend": None,  # argparse.SUPPRESS: no parser default to compare with, and no write
        "cuda_graph_config": {"decode": {"max_bs": 32, "backend": "full"}},
    }
    writes = (
        Write("chunked_prefill_size", 4096, "_handle_gpu_memory_settings", "server_args.py:1493", old=None),
        Write("speculative_algorithm", "EAGLE", "handle_speculative_decoding", "speculative_hook.py:72", old="NEXTN"),
        Write("cuda_graph_config", {"decode": {"max_bs": None, "backend": "full"}}, "parse", old=None),
        Write("cuda_graph_config.decode.max_bs", 32, "handle_gpu_memory_settings", "memory_hook.py:129", old=None),
        PIECEWISE_OFF,
    )
    found = decisions(_resolution(effective, writes), PARSER)
    assert [d.field for d in found] == [
        "disable_piecewise_cuda_graph",
        "cuda_graph_config.decode.max_bs",
        "speculative_algorithm",
        "chunked_prefill_size",
    ]
    off, graph, spec, chunk = found
    assert off.turns_off and off.rule == PIECEWISE_OFF and off.was is False and not off.asked
    assert graph.rule is not None and graph.rule.where == "memory_hook.py:129" and graph.was is None
    assert spec.asked and spec.was == "NEXTN" and spec.concern == "speculative decoding"
    assert chunk.concern == "overlap and scheduling" and chunk.rule is not None


def test_a_failed_resolution_has_no_decisions() -> None:
    assert decisions(Resolution(ARGV, {}, None), PARSER) == []


def test_field_changes_name_each_side_and_fields_only_one_side_has() -> None:
    before = {"disable_piecewise_cuda_graph": True, "chunked_prefill_size": 4096, "old_only": 1, "port": 1}
    after = {"disable_piecewise_cuda_graph": False, "chunked_prefill_size": 4096, "new_only": 2, "port": 2}
    changes = field_changes(before, after, (PIECEWISE_OFF,), ())
    assert [c.field for c in changes] == ["disable_piecewise_cuda_graph", "new_only", "old_only"]
    assert changes[0].rule_before == PIECEWISE_OFF and changes[0].rule_after is None
    assert changes[1].absent_before and changes[2].absent_after


def test_a_setting_a_release_renamed_compares_under_its_newest_name() -> None:
    old = {"cuda_graph_max_bs": 24, "cuda_graph_bs": [1, 2]}
    new = {"cuda_graph_config": {"decode": {"max_bs": 48, "bs": [1, 2]}}}
    rule = Write("cuda_graph_max_bs", 24, "_handle_gpu_memory_settings", "server_args.py:1496")
    (change,) = field_changes(old, new, (rule,), ())
    assert change.field == "cuda_graph_config.decode.max_bs" and change.name_before == "cuda_graph_max_bs"
    assert (change.before, change.after, change.rule_before) == (24, 48, rule)
    assert change.named == "cuda_graph_max_bs -> cuda_graph_config.decode.max_bs"
    assert not change.absent_before and not change.absent_after


def test_the_built_model_is_compared_beside_the_fields() -> None:
    facts = ModelFacts("Qwen3_5ForConditionalGeneration", "Qwen3VLMoeVisionModel", 0, 100, 10, seconds=2.0)
    text_only = ModelFacts("Qwen3_5ForConditionalGeneration", None, 0, 90, 0, seconds=0.1)
    before = config_and_model(Resolution((), {}, {"x": 1}, model=facts))
    after = config_and_model(Resolution((), {}, {"x": 1}, model=text_only))
    fields = {c.field: (c.before, c.after) for c in field_changes(before, after)}
    assert fields == {
        "built_model.vision_tower": ("Qwen3VLMoeVisionModel", None),
        "built_model.param_bytes_per_rank": (100, 90),
        "built_model.vision_param_bytes_per_rank": (10, 0),
    }  # construction time is not a decision
    assert concern_of("built_model.vision_tower") == "model loading"


def test_the_flags_one_variant_adds() -> None:
    reference = ("--model-path", "/m", "--tp-size", "2")
    added = differing_flags(reference, ARGV, PARSER)
    assert [a.flag for a in added] == ["--speculative-algorithm", "--cuda-graph-bs", "--enable-single-batch-overlap"]


def test_a_flag_that_changes_only_its_own_field_is_told_apart() -> None:
    own = FieldChange("enable_single_batch_overlap", "overlap and scheduling", False, True)
    other = FieldChange("disable_piecewise_cuda_graph", "graphs", True, False)
    assert FlagEffect("--enable-single-batch-overlap", "enable_single_batch_overlap", (own,)).only_its_own_field
    assert not FlagEffect("--enforce-piecewise-cuda-graph", "enforce_piecewise_cuda_graph", (other,)).only_its_own_field
    assert not FlagEffect("--x", "x", (), error="ValueError: no").only_its_own_field


def test_concerns_flattening_and_what_turns_an_optimisation_off() -> None:
    assert concern_of("cuda_graph_config.decode.max_bs") == "graphs"
    assert concern_of("speculative_moe_runner_backend") == "speculative decoding"
    assert concern_of("disable_overlap_schedule") == "overlap and scheduling"
    assert concern_of("tp_size") == "parallelism and communication"
    assert concern_of("something_new_in_0_5_99") == "other"
    assert flatten({"a": {"b": {"c": 1}, "d": []}, "_raw": 1, "port": 30000, "e": {}}) == {
        "a.b.c": 1,
        "a.d": [],
        "e": {},
    }
    assert turns_off("disable_piecewise_cuda_graph", False, True)
    assert turns_off("x.enable_thing", True, False)
    assert not turns_off("enable_tf32_matmul", None, False)  # automatic resolved to off: nothing was on
    assert not turns_off("disable_x", None, True) and not turns_off("chunked_prefill_size", 1, 2)
    # 0.5.14+ turn the prefill graph off through its backend: "Turned off by SGLang", not under "graphs".
    assert turns_off("cuda_graph_config.prefill.backend", "breakable", "disabled")
    assert not turns_off("cuda_graph_config.prefill.backend", "disabled", "disabled")
    assert not turns_off("cuda_graph_config.prefill.backend", None, "disabled")
    assert not turns_off("attention_backend", "fa3", "flashinfer")


def test_the_text_leads_with_what_was_turned_off_and_quotes_the_rule() -> None:
    effective = {"disable_piecewise_cuda_graph": True, "chunked_prefill_size": 4096}
    writes = (PIECEWISE_OFF, Write("chunked_prefill_size", 4096, "_handle_gpu_memory_settings", old=None))
    explanation = Explanation(
        "qwen36", "mtp3-defaults", "0.5.13", ARGV, tuple(decisions(_resolution(effective, writes), PARSER))
    )
    text = render([explanation])
    lines = text.splitlines()
    assert lines[2] == "Turned off by SGLang:"
    assert lines[3] == "  disable_piecewise_cuda_graph = True  (default False)"
    assert '"8. Multimodal / VLM models"' in lines[4] and "server_args.py:1376" in lines[4]
    assert "overlap and scheduling:" in lines
    compared = Explanation(
        "qwen36",
        "mtp3-full",
        "0.5.13",
        ARGV,
        (),
        comparison=VariantComparison(
            "mtp3-defaults",
            (
                FieldChange(
                    "disable_piecewise_cuda_graph", "graphs", True, False, PIECEWISE_OFF, None, asked_after=None
                ),
            ),
            (FlagEffect("--enable-single-batch-overlap", "enable_single_batch_overlap", ()),),
        ),
    )
    text = render([compared])
    assert "Against mtp3-defaults: 1 effective field(s) differ" in text
    assert "  disable_piecewise_cuda_graph: True -> False" in text
    assert "--enable-single-batch-overlap: changes nothing" in text
    assert "Turned off" not in text  # against another variant, the difference is the answer
    assert shown_value(list(range(1, 33))) == "[1, 2, 3, ..., 32] (32 values)"


def test_the_probe_takes_the_comment_of_the_statement_or_its_branch_never_a_siblings(tmp_path: Path) -> None:
    source = tmp_path / "server_args.py"
    source.write_text(
        textwrap.dedent(
            """\
            def _handle_missing_default_values(self):
                if self.device is None:
                    self.device = get_device()
                # strip device index from user if any (e.g. "cuda:0" -> "cuda")
                self.device = self.device.split(":")[0]
                if self.random_seed is None:
                    self.random_seed = random.randint(0, 1 << 30)

            def _handle_piecewise_cuda_graph(self):
                # 7. LoRA
                if self.lora_paths:
                    self.disable_piecewise_cuda_graph = True
                # 8. Multimodal / VLM models
                if self.get_model_config().is_multimodal:
                    self.disable_piecewise_cuda_graph = True

            def _handle_gpu_memory_settings(self, gpu_mem):
                if self.mem_fraction_static is None:
                    # Constant meta data (e.g., from attention backend)
                    reserved_mem = 512
                    # ------------------------------------------------
                    self.mem_fraction_static = 0.9

            def _handle_page_size(self):
                if self.page_size is None:
                    # The SHUFFLE 5D layout prefers page_size=64
                    if (
                        is_hip()
                    ):
                        self.page_size = 64
                    elif not is_musa():
                        self.page_size = 1
            """
        )
    )
    lines = source.read_text().splitlines()

    def context(statement: str, nth: int = 0) -> tuple[list[str], str]:
        lineno = [i for i, ln in enumerate(lines, 1) if statement in ln][nth]
        return probe._branch_context(str(source), lineno)

    assert context("self.random_seed = random") == (["if self.random_seed is None"], "")
    assert context('self.device = self.device.split(":")[0]') == (
        [],
        'strip device index from user if any (e.g. "cuda:0" -> "cuda")',
    )
    assert context("self.disable_piecewise_cuda_graph = True", 1) == (
        ["if self.get_model_config().is_multimodal"],
        "8. Multimodal / VLM models",
    )
    assert context("self.mem_fraction_static = 0.9") == (["if self.mem_fraction_static is None"], "")
    assert context("self.page_size = 1") == (["if self.page_size is None", "elif not is_musa()"], "")
    assert context("self.page_size = 64") == (
        ["if self.page_size is None", "if (is_hip())"],
        "The SHUFFLE 5D layout prefers page_size=64",
    )


def test_guards_are_read_from_the_codes_structure(tmp_path: Path) -> None:
    """An elif's statement never takes the comment above its sibling if; a rule found in a table of named
    rules says which one it was (0.5.15's prefill graph was turned off 'under `if predicate()`')."""
    source = tmp_path / "server_args.py"
    source.write_text(
        textwrap.dedent(
            """\
            class ServerArgs:
                def _handle_piecewise_cuda_graph(self):
                    # 8. Multimodal / VLM models
                    if self.is_multimodal:
                        self.disable_piecewise_cuda_graph = True
                    elif self.lora_paths:
                        self.disable_piecewise_cuda_graph = False
                    else:
                        # Nothing asks otherwise
                        self.disable_piecewise_cuda_graph = None

                def _disable_breakable_cudagraph_if_incompatible(self):
                    rules = [
                        ("MLA attention", lambda: self.use_mla_backend()),
                        ("multimodal model", lambda: self.is_multimodal),
                    ]
                    for name, predicate in rules:
                        if predicate():
                            self.cuda_graph_config.prefill.backend = "disabled"
                            return
            """
        )
    )
    lines = source.read_text().splitlines()

    def at(statement: str) -> int:
        return next(i for i, ln in enumerate(lines, 1) if statement in ln)

    assert probe._branch_context(str(source), at("= True")) == (["if self.is_multimodal"], "8. Multimodal / VLM models")
    assert probe._branch_context(str(source), at("= False")) == (["elif self.lora_paths"], "")
    assert probe._branch_context(str(source), at("= None")) == (["else"], "Nothing asks otherwise")
    looped = probe._branch_context(
        str(source), at('backend = "disabled"'), {"name": "multimodal model", "predicate": len}
    )
    assert looped == (["name = 'multimodal model'", "if predicate()"], "")
