"""Planning a variant's argv for a release: raw flags checked, intents spelled, version rules applied."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglperf.model.deployment_file import load
from sglperf.sglang.argv import Option, ParserInfo
from sglperf.sglang.flags import FlagError, check_flags, launch_plan

from ..support.project import QWEN36
from .test_intents import BACKENDS, BOOLEANS, QWEN


def _with(p: ParserInfo, **extra: Option) -> ParserInfo:
    return ParserInfo(p.version, {**p.options, **extra}, p.language_model_only_architectures)


def test_removed_flag_names_flag_version_and_replacement() -> None:
    with pytest.raises(FlagError) as excinfo:
        check_flags(["--enable-piecewise-cuda-graph"], BACKENDS, "variant 'x'")
    message = str(excinfo.value)
    assert "--enable-piecewise-cuda-graph is not accepted by SGLang 0.5.23" in message
    assert "replacement: --cuda-graph-backend-prefill breakable" in message


def test_renamed_flag_outside_intents_gets_its_new_name() -> None:
    p = _with(BACKENDS, **{"--mamba-radix-cache-strategy": Option(dest="m", choices=("auto", "extra_buffer"))})
    with pytest.raises(FlagError, match="replacement: --mamba-radix-cache-strategy"):
        check_flags(["--mamba-scheduler-strategy", "extra_buffer"], p, "v")


def test_unknown_flag_without_replacement_suggests_similar() -> None:
    with pytest.raises(FlagError, match="similar flags: --language-only"):
        check_flags(["--language-onlyy"], BACKENDS, "v")


def test_values_are_not_mistaken_for_flags_and_abbreviations_pass() -> None:
    assert check_flags(["--tp", "2", "--cuda-graph-backend-prefill", "breakable"], BACKENDS, "v") == []


def test_deprecated_flag_warns_with_replacement() -> None:
    p = _with(BOOLEANS, **{"--enable-piecewise-cuda-graph": Option(dest="e", takes_value=False, deprecated=True)})
    p = _with(p, **{"--cuda-graph-backend-prefill": Option(dest="b", choices=("breakable", "disabled"))})
    warnings = check_flags(["--enable-piecewise-cuda-graph"], p, "v")
    assert (
        len(warnings) == 1 and "deprecated in SGLang 0.5.13; use --cuda-graph-backend-prefill breakable" in warnings[0]
    )


def test_plan_applies_version_rules_and_spells_intents() -> None:
    d = load(QWEN36)
    old = _with(BOOLEANS, **{"--mamba-scheduler-strategy": Option(dest="m", choices=("no_buffer", "extra_buffer"))})
    launch = launch_plan(d, d.variant("mtp3-full"), old, "/m", QWEN)
    argv = list(launch.argv)
    assert argv[:4] == ["--model-path", "/m", "--tp-size", "2"]
    assert "--mamba-scheduler-strategy" in argv and launch.env == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert "--enforce-piecewise-cuda-graph" in argv and "--enable-single-batch-overlap" in argv
    assert argv[argv.index("--speculative-num-steps") + 1] == "3"

    new = launch_plan(d, d.variant("mtp1"), BACKENDS, "/m", QWEN)
    assert "--mamba-scheduler-strategy" not in new.argv and new.env == {}
    assert new.argv[new.argv.index("--speculative-num-steps") + 1] == "1"
    assert "SGLANG" not in new.command() and new.command().startswith("python -m sglang.launch_server --model-path /m")


def test_plan_rejects_a_variant_flag_the_release_lacks(tmp_path: Path) -> None:
    d = load(QWEN36)
    variant = d.variant("mtp1").model_copy(update={"flags": ["--enforce-piecewise-cuda-graph"]})
    with pytest.raises(
        FlagError, match=r"variant 'mtp1'.*--enforce-piecewise-cuda-graph is not accepted by SGLang 0.5.23"
    ):
        launch_plan(d, variant, BACKENDS, "/m", QWEN)
