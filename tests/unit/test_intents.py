"""Intents across the three eras of SGLang's flags, with parsers shaped like each era's."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.sglang.argv import Option, ParserInfo
from sglperf.sglang.intents import INTENTS, IntentNotExpressible, SpeculativeSettings, spelling_of_intent_flag

BOOL = Option(dest="x", takes_value=False)
SPEC = {
    f: Option(dest=f)
    for f in (
        "--speculative-algorithm",
        "--speculative-num-steps",
        "--speculative-num-draft-tokens",
        "--speculative-eagle-topk",
    )
}


def parser(
    version: str, *flags: str, backends: tuple[str, ...] | None = None, lmo: tuple[str, ...] | None = None
) -> ParserInfo:
    options = dict.fromkeys(flags, BOOL) | SPEC | {"--tp-size": Option(dest="tp_size")}
    if backends:
        options["--cuda-graph-backend-prefill"] = Option(dest="b", choices=backends)
        options["--cuda-graph-backend-decode"] = Option(dest="d", choices=backends)
    return ParserInfo(version, options, lmo)


OPT_IN = parser("0.5.8", "--enable-piecewise-cuda-graph", "--disable-cuda-graph")
BOOLEANS = parser(
    "0.5.13",
    "--enforce-piecewise-cuda-graph",
    "--disable-piecewise-cuda-graph",
    "--disable-cuda-graph",
    "--language-only",
    "--enable-single-batch-overlap",
)
BACKENDS = parser(
    "0.5.23",
    "--language-only",
    "--language-model-only",
    "--enable-single-batch-overlap",
    "--disable-cuda-graph",
    backends=("full", "breakable", "disabled"),
    lmo=("DeepseekV4ForCausalLM",),
)
QWEN = ("Qwen3_5ForConditionalGeneration",)
prefill = INTENTS["prefill_cuda_graph"]


@pytest.mark.parametrize(
    ("p", "on", "off"),
    [
        (OPT_IN, ["--enable-piecewise-cuda-graph"], []),
        (BOOLEANS, ["--enforce-piecewise-cuda-graph"], ["--disable-piecewise-cuda-graph"]),
        (BACKENDS, ["--cuda-graph-backend-prefill", "breakable"], ["--cuda-graph-backend-prefill", "disabled"]),
    ],
)
def test_prefill_graph_is_spelled_for_each_era(p: ParserInfo, on: list[str], off: list[str]) -> None:
    assert prefill.flags(True, p, QWEN) == on
    assert prefill.flags(False, p, QWEN) == off


def test_prefill_graph_uses_only_backends_the_parser_offers() -> None:
    # 0.5.14-0.5.21 offered tc_piecewise; a release offering only it must get it.
    only_tc = parser("0.5.15", backends=("tc_piecewise", "disabled"))
    assert prefill.flags(True, only_tc, QWEN) == ["--cuda-graph-backend-prefill", "tc_piecewise"]
    with pytest.raises(IntentNotExpressible, match=r"0\.5\.3"):
        prefill.flags(True, parser("0.5.3"), QWEN)


@pytest.mark.parametrize(
    ("effective", "value"),
    [
        ({"enable_piecewise_cuda_graph": True}, True),
        ({"disable_piecewise_cuda_graph": True, "enforce_piecewise_cuda_graph": False}, False),
        ({"disable_piecewise_cuda_graph": False}, True),
        ({"cuda_graph_config": {"prefill": {"backend": "disabled"}}, "disable_piecewise_cuda_graph": False}, False),
        ({"cuda_graph_config": {"prefill": {"backend": "breakable"}}}, True),
    ],
)
def test_prefill_graph_is_read_from_each_era(effective: dict[str, Any], value: bool) -> None:
    assert prefill.read(effective).value is value


def test_unreadable_intent_says_which_fields_it_looked_for() -> None:
    with pytest.raises(KeyError, match=r"cuda_graph_config\.prefill\.backend"):
        prefill.read({"tp_size": 2})


def test_vision_weights_are_never_provable_from_effective_args() -> None:
    vision = INTENTS["vision_weights_skipped"]
    assert vision.flags(True, BACKENDS, QWEN) == ["--language-only"]  # Qwen3.5 is not on the allow-list
    assert vision.flags(True, BACKENDS, ("DeepseekV4ForCausalLM",)) == ["--language-model-only"]
    for effective in ({"language_only": True}, {"language_model_only": True}):
        reading = vision.read(effective)
        assert reading.value is True and reading.provable is False
    assert vision.read({"language_only": False}).value is False  # asked for nothing: provably loaded


def test_speculative_alias_is_normalised() -> None:
    spec = INTENTS["speculative"]
    expected = SpeculativeSettings("NEXTN", 3, 4, 1)
    actual = {"algorithm": "EAGLE", "num_steps": 3, "num_draft_tokens": 4, "eagle_topk": 1}
    assert spec.matches(expected, actual)
    assert not spec.matches(expected, {**actual, "num_steps": 1})
    assert not spec.matches(expected, None)
    assert spec.flags(expected, BACKENDS, QWEN)[:2] == ["--speculative-algorithm", "NEXTN"]


def test_replacements_for_removed_piecewise_flags() -> None:
    assert (spelling_of_intent_flag("--enable-piecewise-cuda-graph", BACKENDS) or "").startswith(
        "--cuda-graph-backend-prefill breakable"
    )
    assert (spelling_of_intent_flag("--enforce-piecewise-cuda-graph", BACKENDS) or "").startswith(
        "--cuda-graph-backend-prefill breakable"
    )
    assert (spelling_of_intent_flag("--disable-piecewise-cuda-graph", BACKENDS) or "").startswith(
        "--cuda-graph-backend-prefill disabled"
    )
    assert spelling_of_intent_flag("--no-such-flag", BACKENDS) is None


@given(st.sampled_from([OPT_IN, BOOLEANS, BACKENDS]), st.booleans())
def test_every_emitted_flag_is_accepted_by_the_parser(p: ParserInfo, value: bool) -> None:
    for name, intent in INTENTS.items():
        if name == "speculative":
            continue
        try:
            argv = intent.flags(value, p, QWEN)
        except IntentNotExpressible:
            continue
        flags = [a for a in argv if a.startswith("--")]
        assert all(p.has(f) for f in flags), (name, argv)
        if len(argv) == 2:
            assert p.accepts(argv[0], argv[1])


def test_abbreviations_resolve_like_argparse() -> None:
    assert BACKENDS.canonical("--tp") == "--tp-size"
    assert BACKENDS.canonical("--language") is None  # ambiguous


def test_overlap_schedule_is_read_negated_and_asked_off_only() -> None:
    overlap = INTENTS["overlap_schedule"]
    assert overlap.read({"disable_overlap_schedule": False}).value is True
    off = overlap.read({"disable_overlap_schedule": True})
    assert off.value is False and off.source == "disable_overlap_schedule = True"
    with_flag = parser("0.5.23", "--disable-overlap-schedule")
    # On is the default and no release has a flag that forces it: SGLang's own rules decide.
    assert overlap.flags(True, with_flag, QWEN) == []
    assert overlap.flags(False, with_flag, QWEN) == ["--disable-overlap-schedule"]
    with pytest.raises(IntentNotExpressible, match="has no --disable-overlap-schedule"):
        overlap.flags(False, BACKENDS, QWEN)
    with pytest.raises(KeyError, match="disable_overlap_schedule not in the effective args"):
        overlap.read({})
