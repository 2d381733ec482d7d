"""What SGLang's own model class builds (on torch's meta device, in the preflight worker), job
isolation inside the worker, and deprecations in the release's own words, against real releases.

One resolver per release answers every question asked of it (each cold start costs seconds of CPU).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from sglperf import preflight
from sglperf.model.deployment_file import load
from sglperf.model.resolution import Resolution
from sglperf.sglang import envs
from sglperf.sglang.argv import Release

from ..support.probe_answers import MODEL_FACTS, answer
from ..support.project import NEW_SGLANG, OLD_SGLANG, QWEN36, QWEN36_CONFIG, SglangPython

pytestmark = [pytest.mark.needs_sglang]

MODEL_DIR = str(QWEN36_CONFIG.parent)
PLAIN = ["--model-path", MODEL_DIR, "--tp-size", "2", "--skip-tokenizer-init"]  # no speculative decoding
LM_ONLY = ["--json-model-override-args", json.dumps({"language_model_only": True})]

# Qwen3.6-27B, tensor-parallel rank 0 of 2, bf16 (0.5.23, read from the model as built).
BYTES_PER_RANK = 27_359_370_352
VISION_BYTES_PER_RANK = 462_694_768
BYTES_PER_RANK_WITHOUT_TOWER = 26_896_675_584
MTP_DRAFT_BYTES_PER_RANK = 3_019_951_104
TOWER = "Qwen3VLMoeVisionModel"


# A small MoE model (Qwen3-MoE layout, 4 layers, 8 experts): SGLang builds a Qwen3MoeSparseMoeBlock
# holding a FusedMoE in every layer.
TINY_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 1024,
    "decoder_sparse_step": 1,
    "max_position_embeddings": 4096,
    "rope_theta": 10000,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "hidden_act": "silu",
}


@dataclass
class Asked:
    release: Release
    variants: dict[str, Resolution]  # qwen36.toml's variants, resolved in file order by one worker
    plain: Resolution
    lm_only: Resolution
    others: dict[str, Resolution]


def _ask(python: str, cache_dir: Path, others: dict[str, dict[str, object]]) -> Iterator[Asked]:
    """qwen36.toml's variants, then Qwen3.6 without MTP (with and without the language-only override),
    then each of ``others`` (a config.json each) without MTP: one worker, in this order."""
    d = load(QWEN36)
    jobs: list[tuple[list[str], dict[str, str]]] = [(PLAIN, {}), ([*PLAIN, *LM_ONLY], {})]
    for name, config in others.items():
        (cache_dir / name).mkdir()
        (cache_dir / name / "config.json").write_text(json.dumps(config))
        jobs.append((["--model-path", str(cache_dir / name), *PLAIN[2:]], {}))
    resolver = preflight.Resolver(python, d.runner, cache_dir=cache_dir / "cache")
    try:
        checks = preflight.check(d, resolver)
        variants = {c.variant.id: c.resolution for c in checks if c.resolution is not None}
        plain, lm_only, *rest = resolver.resolve(jobs)
        yield Asked(resolver.release(), variants, plain, lm_only, dict(zip(others, rest)))
    finally:
        resolver.close()


@pytest.fixture(scope="module")
def new(sglang_python: SglangPython, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Asked]:
    unknown = {**json.loads(QWEN36_CONFIG.read_text()), "architectures": ["NoSuchModelForCausalLM"]}
    others = {"tiny-moe": TINY_MOE, "unknown-architecture": unknown}
    yield from _ask(sglang_python(NEW_SGLANG), tmp_path_factory.mktemp("new"), others)


@pytest.fixture(scope="module")
def old(sglang_python: SglangPython, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Asked]:
    yield from _ask(sglang_python(OLD_SGLANG), tmp_path_factory.mktemp("old"), {})


def test_new_release_builds_the_vision_tower_unless_the_model_is_language_only(new: Asked) -> None:
    built = new.variants["mtp3-defaults"]
    assert built.error is None and built.model_error is None, built.model_error
    model = built.model
    assert model is not None
    assert model.architecture == "Qwen3_5ForConditionalGeneration"
    assert model.vision_tower == TOWER
    assert model.moe_layers == 0  # dense: num_experts in its config, but no expert layers built
    assert model.param_bytes_per_rank == BYTES_PER_RANK
    assert model.vision_param_bytes_per_rank == VISION_BYTES_PER_RANK
    assert model.seconds > 0

    lm_only = new.lm_only.model
    assert lm_only is not None and new.lm_only.model_error is None
    assert lm_only.vision_tower is None and lm_only.vision_param_bytes_per_rank == 0
    assert lm_only.param_bytes_per_rank == BYTES_PER_RANK_WITHOUT_TOWER
    assert BYTES_PER_RANK - BYTES_PER_RANK_WITHOUT_TOWER == VISION_BYTES_PER_RANK


def test_mtp_draft_is_built_only_with_speculative_decoding(new: Asked) -> None:
    for variant, resolution in new.variants.items():
        model = resolution.model
        assert model is not None, (variant, resolution.model_error)
        assert model.draft_architecture == "Qwen3_5ForCausalLMMTP", variant
        assert model.draft_param_bytes_per_rank == MTP_DRAFT_BYTES_PER_RANK, variant
        assert model.draft_error is None
    plain = new.plain.model
    assert plain is not None
    assert plain.draft_architecture is None and plain.draft_param_bytes_per_rank == 0
    assert plain.param_bytes_per_rank == BYTES_PER_RANK  # the same target as with MTP


def test_variants_sharing_a_model_share_one_build(new: Asked) -> None:
    mtp1, mtp3 = new.variants["mtp1"].model, new.variants["mtp3-defaults"].model
    assert mtp1 is not None and mtp3 is not None
    assert mtp1 == mtp3  # built once, seconds included


def test_moe_layers_are_counted_once_per_layer(new: Asked) -> None:
    moe = new.others["tiny-moe"]
    assert moe.model is not None, moe.model_error
    assert moe.model.architecture == "Qwen3MoeForCausalLM" and moe.model.vision_tower is None
    assert moe.model.moe_layers == TINY_MOE["num_hidden_layers"]  # a block and its FusedMoE are one layer


def test_construction_failure_is_a_model_error_not_a_resolution_error(new: Asked) -> None:
    unknown = new.others["unknown-architecture"]
    assert unknown.error is None and unknown.effective is not None  # SGLang resolved it
    assert unknown.model is None
    assert unknown.model_error is not None and unknown.model_error.startswith("ValueError: ")
    assert "NoSuchModelForCausalLM" in unknown.model_error


def test_old_release_builds_the_tower_despite_the_override(old: Asked) -> None:
    default, lm_only = old.plain.model, old.lm_only.model
    assert default is not None and lm_only is not None, (old.plain.model_error, old.lm_only.model_error)
    assert default.vision_tower == TOWER and default.param_bytes_per_rank == BYTES_PER_RANK
    assert lm_only.vision_tower == TOWER and lm_only.param_bytes_per_rank == BYTES_PER_RANK
    speculative = old.variants["mtp3-defaults"].model
    assert speculative is not None and speculative.draft_architecture == "Qwen3_5ForCausalLMMTP"
    assert speculative.moe_layers == 0


def _said(resolution: Resolution) -> tuple[object, ...]:
    return (resolution.error, tuple(resolution.logs))


def test_a_variant_says_the_same_alone_as_after_others(new: Asked, sglang_python: SglangPython, tmp_path: Path) -> None:
    # In `new`, mtp3-full was resolved (and its model built) after three other variants; 0.5.23 used
    # to report "SGLANG_USE_CUDA_IPC_TRANSPORT is deprecated" from the second variant on, because the
    # first one's resolution had set it in the worker's environment.
    after = new.variants["mtp3-full"]
    d = load(QWEN36)
    alone_resolver = preflight.Resolver(sglang_python(NEW_SGLANG), d.runner, cache_dir=tmp_path)
    try:
        (alone,) = [c.resolution for c in preflight.check(d, alone_resolver, ["mtp3-full"]) if c.resolution]
    finally:
        alone_resolver.close()
    assert not alone.cached and not after.cached
    assert _said(alone) == _said(after)
    assert alone.model is not None and after.model is not None
    assert replace(alone.model, seconds=0) == replace(after.model, seconds=0)
    for resolution in new.variants.values():
        assert not any("SGLANG_USE_CUDA_IPC_TRANSPORT" in line.message for line in resolution.logs)
        assert not any("\x1b[" in line.message for line in resolution.logs)


def test_deprecated_options_carry_the_releases_own_words(old: Asked, new: Asked) -> None:
    deprecated = {flag: o for flag, o in old.release.parser.options.items() if o.deprecated}
    assert deprecated
    stream = deprecated["--stream-output"]
    assert stream.replacement == "--incremental-streaming-output"
    assert stream.deprecation_message and "'--stream-output' is deprecated" in stream.deprecation_message
    assert "Use '--incremental-streaming-output'" in stream.deprecation_message
    assert all(o.deprecation_message and "\x1b" not in o.deprecation_message for o in deprecated.values())
    options = new.release.parser.options
    # Help that merely mentions a deprecated flag is not a deprecation of this one.
    assert not options["--smg-grpc-mode"].deprecated
    assert options["--grpc-mode"].deprecated and options["--grpc-mode"].replacement == "--smg-grpc-mode"


def test_enable_breakable_cuda_graph_names_its_replacement_on_0_5_19(tmp_path: Path) -> None:
    env = envs.env_for("0.5.19")
    if not env.ready:
        pytest.skip("SGLang 0.5.19 environment not built (`sglperf env build 0.5.19`, a few minutes)")
    resolver = preflight.Resolver(str(env.python), load(QWEN36).runner, cache_dir=tmp_path)
    try:
        options = resolver.release().parser.options
    finally:
        resolver.close()
    breakable = options["--enable-breakable-cuda-graph"]
    assert breakable.deprecated
    assert breakable.replacement == "--cuda-graph-backend-prefill=breakable"
    assert breakable.deprecation_message is not None
    assert "Use '--cuda-graph-backend-prefill=breakable'" in breakable.deprecation_message
    assert options["--enforce-piecewise-cuda-graph"].replacement == "--cuda-graph-backend-prefill=tc_piecewise"


def test_a_malformed_model_record_in_the_cache_is_discarded(sglang_python: SglangPython, tmp_path: Path) -> None:
    said: list[str] = []
    resolver = preflight.Resolver(
        sglang_python(NEW_SGLANG), load(QWEN36).runner, cache_dir=tmp_path, progress=said.append
    )
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(answer(model=MODEL_FACTS)))
    bad.write_text(json.dumps(answer(model={**MODEL_FACTS, "moe_layers": None})))
    found = resolver._cached_resolution("good", ["--x"], {})
    assert found is not None and found.model is not None
    assert resolver._cached_resolution("bad", ["--x"], {}) is None
    assert not bad.exists() and good.exists()
    assert said and "moe_layers" in said[0]
    assert resolver._worker is None  # nothing was asked of SGLang
