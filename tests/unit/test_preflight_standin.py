"""`preflight.check` and `preflight.explain` on the stand-in resolver: the verdicts, caveats, flag errors,
hints and coverage judgements check makes of what a release resolved, and explain's decisions and
comparisons, with SGLang's resolution replaced by rules written here (real releases: tests/sglang)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import load
from sglperf.model.resolution import SGLangError
from sglperf.model.verdict import Status, Verdict
from sglperf.preflight import check, resolve_variants
from sglperf.preflight.explain import explain
from sglperf.reporting.console import verdict_table
from sglperf.sglang.argv import Option, ParserInfo
from sglperf.sglang.config_fields import ModelScope
from sglperf.testing.standin_resolver import StandInResolver, StandInRule

from ..support.project import ROOT


def _switch(dest: str, help: str = "") -> Option:
    return Option(dest, default=False, takes_value=False, help=help)


PARSER = ParserInfo(
    "0.5.13",
    {
        "--model-path": Option("model_path"),
        "--tp-size": Option("tp_size", default=1),
        "--skip-tokenizer-init": _switch("skip_tokenizer_init"),
        "--enforce-piecewise-cuda-graph": _switch(
            "enforce_piecewise_cuda_graph", "Enforce piecewise CUDA graph (for testing)."
        ),
        "--disable-piecewise-cuda-graph": _switch("disable_piecewise_cuda_graph"),
        "--disable-cuda-graph": _switch("disable_cuda_graph"),
        "--cuda-graph-max-bs": Option("cuda_graph_max_bs"),
        "--disable-overlap-schedule": _switch("disable_overlap_schedule"),
        "--enable-single-batch-overlap": _switch("enable_single_batch_overlap"),
        "--max-running-requests": Option("max_running_requests"),
    },
)


def _sizes(effective: Mapping[str, Any]) -> list[int]:
    largest = int(effective["cuda_graph_max_bs"])
    return sorted({*(b for b in (1, 2, 4, 8, 16, 24, 32, 48) if b <= largest), largest})


RULES = (
    StandInRule(
        "disable_piecewise_cuda_graph",
        True,
        lambda e: not e["enforce_piecewise_cuda_graph"],
        name="_handle_piecewise_cuda_graph",
        where="server_args.py:1376",
        comment="8. Multimodal / VLM models",
        conditions=("if self.get_model_config().is_multimodal",),
    ),
    StandInRule(
        "cuda_graph_max_bs",
        24,
        lambda e: e["cuda_graph_max_bs"] is None,
        name="_handle_gpu_memory_settings",
        where="server_args.py:1496",
        comment="A10, 4090",
        conditions=("if gpu_mem < 35 * 1024",),
    ),
    StandInRule("cuda_graph_bs", _sizes, name="_generate_cuda_graph_batch_sizes", where="server_args.py:1600"),
)
DEPLOYMENT = """
reference_variant = "defaults"
[model]
key = "tiny"
served_path = "/models/tiny"
config = "{config}"
[runner]
name = "1x4090"
gpu_count = 1
gpu_name = "NVIDIA GeForce RTX 4090"
compute_capability = "8.9"
memory_gib = 24
[launch]
tp_size = 1
[expect]
prefill_cuda_graph = true
decode_cuda_graph = true
overlap_schedule = true
[[variants]]
id = "defaults"
[[variants]]
id = "graph"
request = {{ prefill_cuda_graph = true }}
[[variants]]
id = "full"
request = {{ prefill_cuda_graph = true }}
flags = ["--enable-single-batch-overlap"]
[[variants]]
id = "typo"
flags = ["--nosuch-flag"]
[[variants]]
id = "abbreviated"
flags = ["--disable-overlap-sched"]
[[workloads]]
id = "chat"
prompts = "{prompts}"
max_prompts = 4
concurrency = [1, 32]
"""


@pytest.fixture
def deployment(tmp_path: Path) -> Deployment:
    path = tmp_path / "tiny.toml"
    path.write_text(
        DEPLOYMENT.format(
            config=ROOT / "models" / "tiny-qwen3" / "config.json", prompts=ROOT / "data" / "prompts" / "chat.jsonl"
        )
    )
    return load(path)


def _verdicts(deployment: Deployment, resolver: StandInResolver) -> dict[tuple[str, str], Verdict]:
    return {(v.variant, v.intent): v for c in check(deployment, resolver) for v in c.verdicts}


def test_a_request_that_overrides_an_sglang_rule_passes_with_the_rule_and_the_flags_warning(
    deployment: Deployment,
) -> None:
    verdict = _verdicts(deployment, StandInResolver(PARSER, RULES))[("graph", "prefill_cuda_graph")]
    assert verdict.status == Status.PASS
    rule, caution = verdict.caveats
    assert rule.startswith("without the request SGLang decides off: SGLang rule _handle_piecewise_cuda_graph")
    assert "(server_args.py:1376" in rule and "8. Multimodal / VLM models" in rule
    assert caution == "SGLang's help for --enforce-piecewise-cuda-graph: Enforce piecewise CUDA graph (for testing)."


def test_an_intent_sglang_turns_off_fails_with_its_rule_and_how_to_ask_on_this_release(
    deployment: Deployment,
) -> None:
    verdict = _verdicts(deployment, StandInResolver(PARSER, RULES))[("defaults", "prefill_cuda_graph")]
    assert verdict.status == Status.FAIL and verdict.actual == "off" and not verdict.caveats
    assert "SGLang rule _handle_piecewise_cuda_graph (server_args.py:1376" in verdict.message()
    assert (
        "ask for it: request = { prefill_cuda_graph = true } in the variant (on SGLang 0.5.13 that adds "
        "--enforce-piecewise-cuda-graph)"
    ) in verdict.detail


def test_a_flag_the_release_lacks_errors_every_expectation_and_is_never_resolved(deployment: Deployment) -> None:
    resolver = StandInResolver(PARSER, RULES)
    verdicts = _verdicts(deployment, resolver)
    typo = [v for (variant, _), v in verdicts.items() if variant == "typo"]
    assert {v.intent for v in typo} == {"prefill_cuda_graph", "decode_cuda_graph", "overlap_schedule"}
    assert {v.status for v in typo} == {Status.ERROR}
    assert {v.detail for v in typo} == {
        f"{deployment.path} variant 'typo': --nosuch-flag is not accepted by SGLang 0.5.13; no known replacement"
    }
    assert not any("--nosuch-flag" in argv for argv in resolver.asked)
    # One resolution per planned variant, one more per boolean request (graph and full ask for the graph).
    assert len(resolver.asked) == 4 + 2


def test_a_users_abbreviated_flag_against_the_expectation_is_named_as_written(deployment: Deployment) -> None:
    verdict = _verdicts(deployment, StandInResolver(PARSER, RULES))[("abbreviated", "overlap_schedule")]
    assert verdict.status == Status.FAIL
    assert (
        "--disable-overlap-sched (SGLang reads --disable-overlap-schedule) in the variant's own flags turns it "
        "off: remove it there, or put expect = { overlap_schedule = false } in this variant"
    ) in verdict.detail
    assert "ask for it" not in verdict.detail  # asking would add a flag that contradicts the user's


def test_a_decode_graph_below_the_workloads_batch_fails_naming_the_rule_and_the_flag_that_raises_it(
    deployment: Deployment,
) -> None:
    verdict = _verdicts(deployment, StandInResolver(PARSER, RULES))[("defaults", "decode_cuda_graph")]
    assert verdict.status == Status.FAIL
    assert verdict.actual == "on, up to batch 24: eager above"
    assert "chat at concurrency 32" in verdict.detail
    assert "_handle_gpu_memory_settings (server_args.py:1496)" in verdict.detail
    assert (
        "raise it: request = { decode_cuda_graph = true } in the variant (on SGLang 0.5.13 that adds "
        "--cuda-graph-max-bs 32)"
    ) in verdict.detail
    # Where SGLang captures up to the batch, the same expectation passes.
    higher = StandInResolver(PARSER, (RULES[0], StandInRule("cuda_graph_max_bs", 48), RULES[2]))
    assert _verdicts(deployment, higher)[("defaults", "decode_cuda_graph")].status == Status.PASS


def test_a_variant_the_release_refuses_errors_with_its_message(deployment: Deployment) -> None:
    def no_sbo(effective: Mapping[str, Any]) -> SGLangError | None:
        return SGLangError("ValueError", "no SBO here") if effective["enable_single_batch_overlap"] else None

    verdicts = _verdicts(deployment, StandInResolver(PARSER, RULES, refuse=no_sbo))
    refused = verdicts[("full", "prefill_cuda_graph")]
    assert refused.status == Status.ERROR
    assert refused.detail.startswith("SGLang's validation says: ValueError: no SBO here")
    assert verdicts[("graph", "prefill_cuda_graph")].status == Status.PASS


def test_explain_names_what_sglang_turned_off_and_resolves_no_request_twice(deployment: Deployment) -> None:
    resolver = StandInResolver(PARSER, RULES)
    (defaults,) = explain(deployment, resolver, ["defaults"])
    assert defaults.error is None
    off = [d for d in defaults.decisions if d.turns_off]
    assert [(d.field, d.value, d.rule.rule if d.rule else None) for d in off] == [
        ("disable_piecewise_cuda_graph", True, "_handle_piecewise_cuda_graph")
    ]
    assert off[0].was is False and not off[0].asked  # the parser's default, not the argv's
    assert len(resolver.asked) == 1  # resolve only: no variant without its requests


def test_explain_against_another_variant_says_what_each_flag_changed(deployment: Deployment) -> None:
    resolver = StandInResolver(PARSER, RULES)
    (full,) = explain(deployment, resolver, ["full"], against="defaults")
    assert full.comparison is not None and full.comparison.reference == "defaults"
    changed = {c.field: (c.before, c.after) for c in full.comparison.changes}
    assert changed["disable_piecewise_cuda_graph"] == (True, False)
    effects = {e.flag: e for e in full.comparison.flags}
    assert set(effects) == {"--enforce-piecewise-cuda-graph", "--enable-single-batch-overlap"}
    sbo = effects["--enable-single-batch-overlap"]
    assert sbo.only_its_own_field  # accepted, and nothing SGLang goes on to use moves
    enforce = {c.field: (c.before, c.after) for c in effects["--enforce-piecewise-cuda-graph"].changes}
    assert enforce["disable_piecewise_cuda_graph"] == (True, False)


def test_explain_says_when_the_release_refuses_the_variant_without_a_flag(deployment: Deployment) -> None:
    def needs_sbo(effective: Mapping[str, Any]) -> SGLangError | None:
        graph_asked = effective["enforce_piecewise_cuda_graph"]
        return SGLangError("ValueError", "x") if graph_asked and not effective["enable_single_batch_overlap"] else None

    (full,) = explain(deployment, StandInResolver(PARSER, RULES, refuse=needs_sbo), ["full"], against="defaults")
    assert full.comparison is not None
    sbo = next(e for e in full.comparison.flags if e.flag == "--enable-single-batch-overlap")
    assert sbo.error == "ValueError: x" and sbo.changes == ()


def test_resolve_alone_keeps_a_plan_error_for_explain(deployment: Deployment) -> None:
    resolver = StandInResolver(PARSER, RULES)
    (typo,) = resolve_variants(deployment, resolver, ["typo"])
    assert typo.launch is None and typo.resolution is None
    assert typo.plan_error is not None and "--nosuch-flag is not accepted" in typo.plan_error
    (explained,) = explain(deployment, resolver, ["typo"])
    assert explained.error == typo.plan_error


def test_explain_leaves_out_settings_that_cannot_act_on_the_model() -> None:
    """0.5.23 decides a HiCache ratio and a mamba cache share for every model: on a dense model without
    HiCache they change nothing it uses, and are named once instead of explained."""
    dense = ModelScope(linear_attention=False, sliding_window=False, hierarchical_cache=False)
    assert not dense.applies("hicache_ratio") and not dense.applies("mamba_full_memory_ratio")
    assert not dense.applies("mm_feature_transport") and not dense.applies("swa_full_tokens_ratio")
    assert dense.applies("chunked_prefill_size") and dense.applies("built_model.vision_tower")
    assert ModelScope(True, False, True).applies("mamba_full_memory_ratio")
    assert ModelScope(True, False, True).applies("hicache_ratio")


def test_explain_names_out_of_scope_decisions_apart(deployment: Deployment) -> None:
    parser = ParserInfo("0.5.23", {**PARSER.options, "--hicache-ratio": Option("hicache_ratio")})
    rules = (
        *RULES,
        StandInRule("hicache_ratio", 2.0, name="handle_hicache_ratio_default", where="hicache_hook.py:126"),
    )
    (defaults,) = explain(deployment, StandInResolver(parser, rules), ["defaults"])
    assert "hicache_ratio" not in {d.field for d in defaults.decisions}
    assert defaults.out_of_scope == ("hicache_ratio",)
    # What SGLang turned off stays, whatever its scope.
    assert "disable_piecewise_cuda_graph" in {d.field for d in defaults.decisions}


def test_advice_quotes_sglangs_own_reason_instead_of_contradicting_it(deployment: Deployment) -> None:
    """Where SGLang warns why it turned the prefill graph off, the failure quotes that reason before the
    request that would override it, never a bare 'ask for it'."""
    said = "Breakable CUDA graph is incompatible with multimodal model; disabling prefill CUDA graph."
    warned = (replace(RULES[0], warning=said), *RULES[1:])
    verdict = _verdicts(deployment, StandInResolver(PARSER, warned))[("defaults", "prefill_cuda_graph")]
    assert verdict.status == Status.FAIL
    assert f'SGLang says why: "{said}"; to override its reason anyway: request = {{ prefill_cuda_graph = true }}' in (
        verdict.detail
    )
    assert "ask for it" not in verdict.detail


def test_a_typo_in_launch_extra_flags_is_said_once_for_the_deployment(tmp_path: Path) -> None:
    """Issue 53: a typo in [launch] extra_flags was said once per item, naming a variant each time (7 times
    for a first deployment), though no variant wrote it."""
    path = tmp_path / "tiny.toml"
    config, prompts = ROOT / "models" / "tiny-qwen3" / "config.json", ROOT / "data" / "prompts" / "chat.jsonl"
    path.write_text(
        DEPLOYMENT.format(config=config, prompts=prompts).replace(
            "tp_size = 1", 'tp_size = 1\nextra_flags = ["--context-lenght", "8192"]'
        )
    )
    verdicts = [v for c in check(load(path), StandInResolver(PARSER, RULES)) for v in c.verdicts]
    assert len(verdicts) > 7 and {v.status for v in verdicts} == {Status.ERROR}
    said = f"{path} [launch] extra_flags: --context-lenght is not accepted by SGLang 0.5.13"
    assert all(v.detail.startswith(said) for v in verdicts)
    table = verdict_table(verdicts)
    assert table.count("--context-lenght") == 1, table
    assert (
        f"tiny: SGLang 0.5.13 refused {len(verdicts)} items (variants defaults, graph, full, typo, abbreviated)"
        in table
    )
    assert "variant 'defaults'" not in table
