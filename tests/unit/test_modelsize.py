"""Parameter counts from config.json and what a measured weight memory says about the vision tower."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest

from sglperf.model.checkpoint import CheckpointFacts, ModelSize
from sglperf.sglang.weight_memory import VisionEvidence, classify_weight_memory

from ..support.project import QWEN36_CONFIG

pytestmark = pytest.mark.selftest


# Counted from models/qwen3.6-27b/config.json (bf16):
#   text   26,895,998,464 = embeddings 2 x 248320 x 5120 (untied) + 48 GatedDeltaNet layers + 16 gated-attention
#                            layers (each with a 5120->17408 SwiGLU MLP) + norms
#   vision    460,730,096 = Conv3d patch embed, 2304 learned positions, 27 blocks of 1152, merger to 5120
#   mtp       424,699,392 = fc 10240->5120 + one gated-attention layer + 3 norms (embeddings/lm_head shared)
#   total  27,781,427,952 = 2.9 % above the published "27B"
QWEN36_TEXT = 26_895_998_464
QWEN36_VISION = 460_730_096
QWEN36_MTP = 424_699_392

# The MTP tensors a Qwen3.6-27B checkpoint ships (from its safetensors header): an independent check.
QWEN36_MTP_SHAPES = [
    (5120, 10240),
    (5120,),
    (5120, 17408),
    (17408, 5120),
    (17408, 5120),
    (5120,),
    (256,),
    (1024, 5120),
    (5120, 6144),
    (256,),
    (12288, 5120),
    (1024, 5120),
    (5120,),
    (5120,),
    (5120,),
]

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "bfloat16",
}
QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def qwen36_config() -> dict[str, Any]:
    config: dict[str, Any] = json.loads(QWEN36_CONFIG.read_text())
    return config


@pytest.fixture(scope="module")
def qwen36(qwen36_config: dict[str, Any]) -> ModelSize:
    return CheckpointFacts(qwen36_config).size()


def test_qwen36_counts(qwen36: ModelSize) -> None:
    assert (qwen36.text_params, qwen36.vision_params, qwen36.mtp_params) == (QWEN36_TEXT, QWEN36_VISION, QWEN36_MTP)
    assert qwen36.mtp_params == sum(math.prod(shape) for shape in QWEN36_MTP_SHAPES)
    assert qwen36.mtp_replicated_params == 10240 * 5120
    assert qwen36.dtype_bytes == 2
    assert qwen36.total_params == 27_781_427_952
    assert abs(qwen36.total_params / 27e9 - 1) < 0.03


def test_qwen36_weight_memory_at_tp2(qwen36: ModelSize) -> None:
    per_gpu = qwen36.weight_gib_per_gpu
    assert per_gpu(2, vision=False, vision_replicated=False) == pytest.approx(25.049, abs=1e-3)
    assert per_gpu(2, vision=True, vision_replicated=False) == pytest.approx(25.478, abs=1e-3)
    assert per_gpu(2, vision=True, vision_replicated=True) == pytest.approx(25.907, abs=1e-3)
    # MTP: the layer is sharded, its fc is not.
    assert per_gpu(2, vision=False, vision_replicated=False, mtp=True) == pytest.approx(25.493, abs=1e-3)
    assert per_gpu(1, vision=True, vision_replicated=False) == per_gpu(1, vision=True, vision_replicated=True)
    with pytest.raises(ValueError, match="tp must be >= 1"):
        per_gpu(0, vision=False, vision_replicated=False)


def test_layer_types_derived_from_interval(qwen36_config: dict[str, Any], qwen36: ModelSize) -> None:
    config = copy.deepcopy(qwen36_config)
    del config["text_config"]["layer_types"]
    assert CheckpointFacts(config).size() == qwen36


def test_text_only_export_of_the_hybrid(qwen36_config: dict[str, Any]) -> None:
    size = CheckpointFacts({**qwen36_config["text_config"], "model_type": "qwen3_5_text"}).size()
    assert (size.text_params, size.vision_params, size.mtp_params) == (QWEN36_TEXT, 0, QWEN36_MTP)


def test_generic_text_only_configs() -> None:
    assert CheckpointFacts(LLAMA3_8B).size() == ModelSize(8_030_261_248, 0, 0, 2)  # Meta-Llama-3-8B
    assert CheckpointFacts(QWEN25_05B).size() == ModelSize(494_032_768, 0, 0, 2)  # Qwen2.5-0.5B: tied, q/k/v biases
    fp32 = CheckpointFacts({**QWEN25_05B, "torch_dtype": "float32"}).size()
    assert fp32.dtype_bytes == 4
    assert fp32.weight_gib_per_gpu(1, vision=True, vision_replicated=True) == pytest.approx(494_032_768 * 4 / 2**30)


def test_missing_keys_are_named() -> None:
    with pytest.raises(ValueError) as err:
        CheckpointFacts({"model_type": "llama", "hidden_size": 4096}).size()
    assert "missing keys: vocab_size, intermediate_size, num_hidden_layers, num_attention_heads" in str(err.value)


def test_missing_hybrid_keys_are_named(qwen36_config: dict[str, Any]) -> None:
    config = copy.deepcopy(qwen36_config)
    del config["text_config"]["linear_num_key_heads"]
    del config["vision_config"]["out_hidden_size"]
    with pytest.raises(ValueError) as err:
        CheckpointFacts(config).size()
    assert str(err.value).startswith(
        "config.json: cannot count parameters, missing keys: text_config.linear_num_key_heads, "
        "vision_config.out_hidden_size (supported: "
    )
    with pytest.raises(ValueError, match="missing keys: text_config"):
        CheckpointFacts({"model_type": "qwen3_5"}).size()


@pytest.mark.parametrize(
    "config, message",
    [
        ({**LLAMA3_8B, "num_local_experts": 8}, "mixture-of-experts"),
        ({"model_type": "llava", "text_config": {}, "vision_config": {}}, "model_type 'llava' is not supported"),
        ({**LLAMA3_8B, "torch_dtype": "int4"}, "dtype 'int4'"),
        ({key: v for key, v in LLAMA3_8B.items() if key != "torch_dtype"}, "torch_dtype"),
        ({**LLAMA3_8B, "quantization_config": {"quant_method": "fp8"}}, "quantized"),
    ],
)
def test_unsupported_shapes(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CheckpointFacts(config).size()


# --- classification ------------------------------------------------------------------------------


def test_text_only_measurement_is_skipped(qwen36: ModelSize) -> None:
    evidence = classify_weight_memory(25.06, qwen36, tp=2)
    assert evidence.verdict == "skipped"
    assert evidence.detail == (
        "weights 25.06 GiB/GPU: text-only 25.05, with vision tower 25.48-25.91 -> vision tower skipped"
    )


def test_vision_measurement_is_loaded(qwen36: ModelSize) -> None:
    evidence = classify_weight_memory(25.91, qwen36, tp=2)
    assert evidence == VisionEvidence(
        "loaded",
        25.91,
        evidence.text_only_gib,
        evidence.vision_sharded_gib,
        evidence.vision_replicated_gib,
        False,
        "weights 25.91 GiB/GPU: text-only 25.05, with vision tower 25.48-25.91 -> vision tower loaded",
    )
    assert classify_weight_memory(25.30, qwen36, tp=2).verdict == "loaded"  # past the midpoint 25.26


def test_far_measurement_is_unclear(qwen36: ModelSize) -> None:
    evidence = classify_weight_memory(40.0, qwen36, tp=2)
    assert evidence.verdict == "unclear"
    assert "does not describe this checkpoint" in evidence.detail


def test_mtp_layer_is_not_mistaken_for_the_vision_tower(qwen36: ModelSize) -> None:
    # Text-only plus MTP weighs about what text-only plus vision does.
    assert classify_weight_memory(25.49, qwen36, tp=2).verdict == "loaded"
    evidence = classify_weight_memory(25.49, qwen36, tp=2, mtp_loaded=True)
    assert evidence.verdict == "skipped"
    assert "(incl. MTP layer)" in evidence.detail


def test_tiny_vision_tower_is_unclear() -> None:
    size = ModelSize(text_params=8_000_000_000, vision_params=10_000_000, mtp_params=0, dtype_bytes=2)
    evidence = classify_weight_memory(7.46, size, tp=2)
    assert evidence.verdict == "unclear"
    assert "too small to tell" in evidence.detail
