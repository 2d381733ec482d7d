"""The decode roofline: the bandwidth table, weight bytes per step, and the arithmetic."""

from __future__ import annotations

import json

import pytest

from sglperf.baselines.roofline import decode_roofline, embedding_bytes_per_gpu, weight_bytes_per_step
from sglperf.model.deployment import RunnerProfile
from sglperf.model.hardware import Bandwidth, memory_bandwidth, vendor_bandwidth
from sglperf.model.resolution import ModelFacts

from ..support.project import QWEN36_CONFIG

pytestmark = pytest.mark.selftest


@pytest.mark.parametrize(
    ("name", "gbs"),
    [
        ("NVIDIA RTX A6000", 768),
        ("NVIDIA A100-SXM4-40GB", 1555),
        ("NVIDIA A100-PCIE-40GB", 1555),
        ("NVIDIA A100-SXM4-80GB", 2039),
        ("NVIDIA A100 80GB PCIe", 1935),
        ("NVIDIA H100 80GB HBM3", 3350),
        ("NVIDIA H100 PCIe", 2000),
        ("NVIDIA H100 NVL", 3900),
        ("NVIDIA H200", 4800),
        ("NVIDIA L40S", 864),
        ("NVIDIA L40", 864),
        ("NVIDIA L4", 300),
        ("NVIDIA GeForce RTX 4090", 1008),
        ("NVIDIA GeForce RTX 3090", 936),
        ("NVIDIA GeForce RTX 3090 Ti", 1008),
        ("NVIDIA A10", 600),
        ("NVIDIA A10G", 600),
        ("NVIDIA RTX 6000 Ada Generation", 960),
        ("Tesla T4", 320),
    ],
)
def test_vendor_bandwidth_by_the_names_nvidia_smi_reports(name: str, gbs: float) -> None:
    found = vendor_bandwidth(name)
    assert found is not None and found.gbs == gbs and found.source


def test_unknown_gpu_and_the_runner_override() -> None:
    assert vendor_bandwidth("Some Future GPU") is None
    assert memory_bandwidth("Some Future GPU", 1234.0) == Bandwidth(1234.0, "runner profile memory_bandwidth_gbs")
    assert memory_bandwidth("NVIDIA RTX A6000", 700.0).gbs == 700.0  # type: ignore[union-attr]
    profile = RunnerProfile(
        name="r",
        gpu_count=2,
        gpu_name="NVIDIA RTX A6000",
        compute_capability="8.6",
        memory_gib=48,
        memory_bandwidth_gbs=700.0,
    )
    assert "memory_bandwidth_gbs" not in profile.as_probe_profile()  # not simulated, not in the preflight cache key
    with pytest.raises(ValueError, match="memory_bandwidth_gbs"):
        RunnerProfile(
            name="r", gpu_count=2, gpu_name="x", compute_capability="8.6", memory_gib=48, memory_bandwidth_gbs=-1.0
        )


def test_weight_bytes_from_preflight_drop_the_vision_tower_and_an_untied_embedding() -> None:
    config = json.loads(QWEN36_CONFIG.read_text())
    text = config["text_config"]
    embedding = text["vocab_size"] * text["hidden_size"] * 2 // 2
    assert embedding_bytes_per_gpu(config, 2, 2) == embedding
    facts = ModelFacts("Qwen3_5ForConditionalGeneration", "Qwen3VisionModel", 0, 28_000_000_000, 900_000_000)
    weights = weight_bytes_per_step(facts, config, 2)
    assert weights.bytes_per_gpu == 28_000_000_000 - 900_000_000 - embedding
    assert weights.source.startswith("preflight")
    tied = {**config, "text_config": {**text, "tie_word_embeddings": True}}
    assert weight_bytes_per_step(facts, tied, 2).bytes_per_gpu == 28_000_000_000 - 900_000_000


def test_weight_bytes_from_config_json_without_preflight() -> None:
    config = json.loads(QWEN36_CONFIG.read_text())
    one, two = weight_bytes_per_step(None, config, 1), weight_bytes_per_step(None, config, 2)
    assert one.source.startswith("config.json")
    assert 50e9 < one.bytes_per_gpu < 56e9  # ~27B bf16 parameters, minus the embedding
    assert two.bytes_per_gpu == pytest.approx(one.bytes_per_gpu / 2, rel=1e-6)
    with pytest.raises(ValueError, match="tp"):
        weight_bytes_per_step(None, config, 0)


def test_roofline_arithmetic() -> None:
    weights = weight_bytes_per_step(None, json.loads(QWEN36_CONFIG.read_text()), 2)
    plain = decode_roofline(Bandwidth(768.0, "t"), weights, 20.0, None, "NVIDIA RTX A6000")
    assert plain.limit_tok_s == pytest.approx(768e9 / weights.bytes_per_gpu)
    assert plain.tokens_per_step == 1.0 and plain.fraction == pytest.approx(20.0 / plain.limit_tok_s)
    mtp = decode_roofline(Bandwidth(768.0, "t"), weights, 70.0, 2.5, "NVIDIA RTX A6000")
    assert mtp.limit_tok_s == pytest.approx(2.5 * plain.limit_tok_s)
    assert 0.85 < mtp.fraction < 1.0  # qwen36 at ~70 tok/s with MTP on 2x A6000: near the limit
