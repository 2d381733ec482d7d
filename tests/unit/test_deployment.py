"""Deployment files: the shipped one loads; every kind of bad file gets an error naming file and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglperf.model.deployment_file import DeploymentError, discover, load
from sglperf.model.intent_names import SPECULATIVE
from sglperf.model.workload import Workload
from sglperf.sglang.flags import KV_POOL_CAP_FLAG

from ..support.project import QWEN36, ROOT


def test_shipped_qwen36_loads_with_required_variants() -> None:
    d = load(QWEN36)
    assert d.key == "qwen36"
    assert d.runner.gpu_count == 2 and d.runner.compute_capability == "8.6"
    assert d.launch.tp_size == 2 and d.launch.speculative and d.launch.speculative.algorithm == "NEXTN"
    assert d.architectures == ("Qwen3_5ForConditionalGeneration",)
    ids = [v.id for v in d.variants]
    assert ids == ["mtp1", "mtp3-defaults", "mtp3-prefill-graph", "mtp3-full"]
    for variant in d.variants:
        assert d.expectations_for(variant)["prefill_cuda_graph"] is True
    mtp1, mtp3 = d.speculative_for(d.variant("mtp1")), d.speculative_for(d.variant("mtp3-defaults"))
    assert mtp1 is not None and mtp1.num_steps == 1
    assert mtp3 is not None and mtp3.num_steps == 3
    full = d.expectations_for(d.variant("mtp3-full"))
    assert full["single_batch_overlap"] and full["vision_weights_skipped"]
    assert full[SPECULATIVE].num_draft_tokens == 4


BAD_FILES = {
    "unknown top-level field": ({"[model]": "colour = 'red'\n[model]"}, "colour: unknown field"),
    "unknown intent in expect": (
        {"prefill_cuda_graph = true\ndecode": "prefil_cuda_graph = true\ndecode"},
        "expect: unknown intent 'prefil_cuda_graph'; allowed: decode_cuda_graph, overlap_schedule, prefill_cuda_graph",
    ),
    "unknown intent in a variant": (
        {"request = { prefill_cuda_graph = true }\n#": "request = { piecewise = true }\n#"},
        "variants[2].request: unknown intent 'piecewise'",
    ),
    "reference variant that is none": (
        {'reference_variant = "mtp3-defaults"': 'reference_variant = "mtp9"'},
        "reference_variant: 'mtp9' is not a variant (mtp1, mtp3-defaults, mtp3-prefill-graph, mtp3-full)",
    ),
    "expected effect on a workload that is none": (
        {"{ prefill-long = { ttft_s": "{ prefill-short = { ttft_s"},
        "variants[2].expect_effect.prefill-short: no such workload (workloads: chat-at-rate, decode-chat,",
    ),
    "expected effect of an unknown metric": (
        {'{ ttft_s = "lower" }': '{ tok_s = "lower" }'},
        "variants[2].expect_effect: prefill-long: unknown metric(s) tok_s; known: accept_length",
    ),
    "expected effect in a direction that is none": (
        {'{ ttft_s = "lower" }': '{ ttft_s = "faster" }'},
        "variants[2].expect_effect.prefill-long.ttft_s: Input should be 'lower', 'higher' or 'none'",
    ),
    "expected effect on the reference itself": (
        {'reference_variant = "mtp3-defaults"': 'reference_variant = "mtp3-prefill-graph"'},
        "variants[2].expect_effect: 'mtp3-prefill-graph' is the reference variant",
    ),
    "wrong type": ({"tp_size = 2": "tp_size = 'two'"}, "launch.tp_size: Input should be a valid integer"),
    "duplicate variant": ({'id = "mtp3-full"': 'id = "mtp1"'}, "duplicate variant id 'mtp1'"),
    "bad compute capability": (
        {'compute_capability = "8.6"': 'compute_capability = "sm86"'},
        "runner.compute_capability: 'sm86' is not allowed; expected a compute capability",
    ),
    "tp larger than the runner": ({"tp_size = 2": "tp_size = 4"}, "launch.tp_size: 4 exceeds runner.gpu_count 2"),
    "bad version specifier": (
        {'sglang = "<0.5.20"': 'sglang = "before 0.5.20"'},
        "launch.when[0].sglang: 'before 0.5.20' is not a version specifier",
    ),
    "missing required field": ({'gpu_name = "NVIDIA RTX A6000"\n': ""}, "runner: gpu_name: required field is missing"),
    "variant id with spaces": ({'id = "mtp1"': 'id = "mtp 1"'}, "variants[0].id: 'mtp 1' is not allowed"),
    "intent value not a bool": (
        {"decode_cuda_graph = true": "decode_cuda_graph = 'yes'"},
        "expect.decode_cuda_graph: Input should be a valid boolean",
    ),
    "unknown metric threshold": (
        {"thresholds = { ttft_s = 0.05 }": "thresholds = { tok_s = 0.05 }"},
        "workloads[2].thresholds: unknown metric 'tok_s'; allowed: accept_length",
    ),
    "unknown metric in the runner's thresholds": (
        {"sm_count = 84\n": "sm_count = 84\nthresholds = { tok_s = 0.5 }\n"},
        "runner.thresholds: unknown metric 'tok_s'; allowed: accept_length",
    ),
    "cpu kernel on a GPU runner": (
        {"sm_count = 84\n": 'sm_count = 84\ncpu_kernel = "torch-native"\n'},
        'runner: cpu_kernel: only a CPU runner (device = "cpu") has one',
    ),
    "unknown cpu kernel": (
        {"sm_count = 84\n": 'sm_count = 84\ncpu_kernel = "avx2"\n'},
        "runner.cpu_kernel: Input should be 'sgl-kernel' or 'torch-native'",
    ),
    "missing prompt set": (
        {'prompts = "../data/prompts/code.jsonl"': 'prompts = "../data/prompts/nope.jsonl"'},
        "workloads[1].prompts:",
    ),
    "missing config.json": (
        {'config = "../models/qwen3.6-27b/config.json"': 'config = "../models/nope/config.json"'},
        "model.config:",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_deployment_file_names_file_and_field(case: str, deployment_dir: Path) -> None:
    replace, expected = BAD_FILES[case]
    path = deployment_dir / "deployments" / "qwen36.toml"
    path.write_text(_apply(replace))
    with pytest.raises(DeploymentError) as excinfo:
        load(path)
    message = str(excinfo.value)
    assert str(path) in message
    assert expected in message, message


def _apply(replace: dict[str, str]) -> str:
    text = QWEN36.read_text()
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def test_not_toml(deployment_dir: Path) -> None:
    path = deployment_dir / "deployments" / "qwen36.toml"
    path.write_text("[model\nkey = 1")
    with pytest.raises(DeploymentError, match=r"qwen36.toml: not valid TOML"):
        load(path)


def test_key_must_match_file_name(deployment_dir: Path) -> None:
    path = deployment_dir / "deployments" / "other.toml"
    path.write_text('key = "qwen36"\n' + QWEN36.read_text())
    with pytest.raises(DeploymentError, match=r"key: 'qwen36' must match the file name 'other'"):
        load(path)


def test_config_without_architectures(deployment_dir: Path) -> None:
    (deployment_dir / "models" / "qwen3.6-27b" / "config.json").write_text('{"model_type": "x"}')
    path = deployment_dir / "deployments" / "qwen36.toml"
    path.write_text(QWEN36.read_text())
    with pytest.raises(DeploymentError, match="has no 'architectures' list"):
        load(path)


def test_discover_reads_folders_and_reports_empty(deployment_dir: Path) -> None:
    (deployment_dir / "deployments" / "qwen36.toml").write_text(QWEN36.read_text())
    assert [d.key for d in discover([deployment_dir / "deployments"])] == ["qwen36"]
    with pytest.raises(DeploymentError, match="no deployment files"):
        discover([deployment_dir / "models"])


def test_thresholds_for_a_workload_are_its_own_over_the_runners() -> None:
    tiny = load(ROOT / "deployments" / "tiny-cpu.toml")
    floors = tiny.runner.thresholds
    assert floors["decode_tok_s"] == 0.7  # the CPU tier's measured noise, for users' workloads too
    user = Workload(id="mine", prompts=Path("../data/prompts/chat.jsonl"), thresholds={"ttft_s": 0.2})
    inherited = {"verify_steps_s": floors["decode_tok_s"]}  # a part of decode tok/s takes its floor
    assert tiny.thresholds_for(user) == {**floors, "ttft_s": 0.2, **inherited}
    assert all(tiny.thresholds_for(w) == {**floors, **inherited} for w in tiny.workloads)
    assert load(QWEN36).thresholds_for(user) == {"ttft_s": 0.2}


def test_a_launch_flag_is_taken_out_with_its_value_and_the_rest_kept() -> None:
    shipped = load(ROOT / "deployments" / "tiny-cpu.toml")
    flags = shipped.launch.extra_flags
    at = flags.index(KV_POOL_CAP_FLAG)
    without = shipped.without_launch_flag(KV_POOL_CAP_FLAG)
    assert without.launch.extra_flags == [*flags[:at], *flags[at + 2 :]]
    assert shipped.launch.extra_flags == flags and without.variants == shipped.variants
    with pytest.raises(KeyError, match=r"tiny-cpu\.toml: launch\.extra_flags has no --no-such-flag"):
        shipped.without_launch_flag("--no-such-flag")


# Issue 53: `output_length` got no "did you mean"; every unknown key with a close known one now does, where
# it is (a workload, a synthetic set's own kind, the runner, whose own check used to hide its unknown keys).
DID_YOU_MEAN = {
    "a workload's key": (
        {"output_len = 256": "output_length = 256"},
        "workloads[0].output_length: unknown field; did you mean 'output_len'?",
    ),
    "a runner's key, hidden by its own check": (
        {"gpu_count = 2": "gpu_cnt = 2"},
        "runner.gpu_cnt: unknown field; did you mean 'gpu_count'?",
    ),
    "a synthetic set's key": (
        {"output_len = 32\n": 'output_len = 32\nsynthetic = { kind = "random", cnt = 4, input_len = 8 }\n'},
        "workloads[2].synthetic.random.cnt: unknown field; did you mean 'count'?",
    ),
    "an intent": (
        {"single_batch_overlap = true, ": "single_batch_overlapp = true, "},
        "variants[3].request: unknown intent 'single_batch_overlapp'; allowed: decode_cuda_graph, overlap_schedule, "
        "prefill_cuda_graph, single_batch_overlap, speculative, vision_weights_skipped; did you mean "
        "'single_batch_overlap'? (variant 'mtp3-full')",
    ),
    "a metric": ({"thresholds = { ttft_s = 0.05 }": "thresholds = { ttft = 0.05 }"}, "did you mean 'ttft_s'?"),
}


@pytest.mark.parametrize("case", sorted(DID_YOU_MEAN))
def test_an_unknown_key_close_to_a_known_one_gets_did_you_mean(case: str, deployment_dir: Path) -> None:
    replace, expected = DID_YOU_MEAN[case]
    path = deployment_dir / "deployments" / "qwen36.toml"
    path.write_text(_apply(replace))
    with pytest.raises(DeploymentError) as excinfo:
        load(path)
    message = str(excinfo.value)
    assert expected in message, message
    problems = message.split("invalid deployment file:\n", 1)[1]
    assert problems.count("unknown") == 1, message  # said once, where pydantic would say it too


def test_an_unknown_key_far_from_every_known_one_gets_none(deployment_dir: Path) -> None:
    path = deployment_dir / "deployments" / "qwen36.toml"
    path.write_text(_apply({"[model]": "colour = 'red'\n[model]"}))
    with pytest.raises(DeploymentError, match=r"  - colour: unknown field$"):
        load(path)
