"""The decode roofline: the bandwidth table, weight bytes per step, and the arithmetic."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sglperf.baselines.roofline import (
    EMULATOR_NOTE,
    IMPOSSIBLE_ABOVE,
    RooflineError,
    WeightBytes,
    decode_roofline,
    embedding_bytes_per_gpu,
    weight_bytes_per_step,
)
from sglperf.model.checkpoint import CheckpointFacts
from sglperf.model.hardware import Bandwidth, memory_bandwidth, vendor_bandwidth
from sglperf.model.measurement import Roofline
from sglperf.model.resolution import ModelFacts
from sglperf.model.runner_profile import RunnerProfile
from sglperf.session.measurement import Measurement
from sglperf.session.running import RunningVariant

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
    assert embedding_bytes_per_gpu(CheckpointFacts(config), 2, 2) == embedding
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
    with pytest.raises(RooflineError, match="tp"):  # its own class: a measurement notes it, a bug stays a bug
        weight_bytes_per_step(None, config, 0)


def test_roofline_arithmetic() -> None:
    weights = weight_bytes_per_step(None, json.loads(QWEN36_CONFIG.read_text()), 2)
    plain = decode_roofline(Bandwidth(768.0, "t"), weights, 20.0, None, "NVIDIA RTX A6000")
    assert plain.limit_tok_s == pytest.approx(768e9 / weights.bytes_per_gpu)
    assert plain.tokens_per_step == 1.0 and plain.fraction == pytest.approx(20.0 / plain.limit_tok_s)
    mtp = decode_roofline(Bandwidth(768.0, "t"), weights, 70.0, 2.5, "NVIDIA RTX A6000")
    assert mtp.limit_tok_s == pytest.approx(2.5 * plain.limit_tok_s)
    assert 0.85 < mtp.fraction < 1.0  # qwen36 at ~70 tok/s with MTP on 2x A6000: near the limit


def test_the_weights_note_says_what_was_excluded_once() -> None:
    config = json.loads(QWEN36_CONFIG.read_text())
    text = config["text_config"]
    tied = {**config, "text_config": {**text, "tie_word_embeddings": True}}
    vision = ModelFacts("Qwen3_5ForConditionalGeneration", "Qwen3VisionModel", 0, 28_000_000_000, 900_000_000)
    text_only = ModelFacts("Qwen3_5ForCausalLM", None, 0, 27_000_000_000, 0)
    notes = {
        weight_bytes_per_step(vision, config, 2).source: (
            "preflight: parameters SGLang's Qwen3_5ForConditionalGeneration holds on TP rank 0, "
            "vision tower and input embedding excluded"
        ),
        weight_bytes_per_step(vision, tied, 2).source: (
            "preflight: parameters SGLang's Qwen3_5ForConditionalGeneration holds on TP rank 0, vision tower excluded"
        ),
        weight_bytes_per_step(text_only, tied, 2).source: (
            "preflight: parameters SGLang's Qwen3_5ForCausalLM holds on TP rank 0"
        ),
        weight_bytes_per_step(None, config, 2).source: "config.json: text weights / TP 2, input embedding excluded",
        weight_bytes_per_step(None, tied, 2).source: "config.json: text weights / TP 2",
    }
    for got, want in notes.items():
        assert got == want
        assert "excluded excluded" not in got


A6000 = Bandwidth(768.0, "NVIDIA RTX A6000 datasheet (768 GB/s)")
WEIGHTS = WeightBytes(25_600_000_000, "preflight: parameters SGLang's X holds on TP rank 0")


def test_a_share_above_the_limit_says_the_inputs_or_the_measurement_are_wrong_and_names_them() -> None:
    limit = 768e9 / WEIGHTS.bytes_per_gpu * 2.5  # 75 tok/s
    r = decode_roofline(A6000, WEIGHTS, 16.6 * limit, 2.5, "NVIDIA RTX A6000")
    assert r.fraction == pytest.approx(16.6)  # the ratio is kept in the record, for the data
    assert r.problem == (
        "decode 1245 tok/s is 1660% of the computed limit of 75 tok/s (over 105% is impossible, not fast): "
        "the roofline inputs or the measurement are wrong. Inputs: bandwidth 768 GB/s (NVIDIA RTX A6000 "
        "datasheet (768 GB/s)); weight bytes per step 25.6 GB per GPU (preflight: parameters SGLang's X holds "
        "on TP rank 0); tokens per step 2.5 (measured acceptance length (median over rounds))"
    )


@pytest.mark.parametrize(("share", "impossible"), [(0.93, False), (1.0, False), (1.04, False), (1.06, True)])
def test_noise_just_over_the_limit_is_tolerated(share: float, impossible: bool) -> None:
    limit = 768e9 / WEIGHTS.bytes_per_gpu
    r = decode_roofline(A6000, WEIGHTS, share * limit, None, "NVIDIA RTX A6000")
    assert (r.problem is not None) is impossible
    assert IMPOSSIBLE_ABOVE == 1.05


def test_records_written_before_the_check_still_load() -> None:
    old = {
        "gpu": "NVIDIA RTX A6000",
        "bandwidth_gbs": 768.0,
        "bandwidth_source": "t",
        "weight_bytes_per_gpu": 1,
        "weight_source": "w",
        "tokens_per_step": 1.0,
        "tokens_per_step_source": "1",
        "limit_tok_s": 1.0,
        "measured_tok_s": 16.6,
        "fraction": 16.6,
    }
    assert Roofline.model_validate(old).problem is None


def _measurement(emulated: bool) -> Measurement:
    """A measurement with only what `_roofline` reads: the server's facts, the runner and the model."""
    config: dict[str, Any] = json.loads(QWEN36_CONFIG.read_text())
    deployment = SimpleNamespace(
        runner=SimpleNamespace(gpu_name="NVIDIA RTX A6000", memory_bandwidth_gbs=None),
        launch=SimpleNamespace(tp_size=2),
        speculative_for=lambda variant: None,
    )
    running = SimpleNamespace(
        facts=SimpleNamespace(emulated=emulated),
        deployment=deployment,
        variant=None,
        predicted_model=None,
        hf_config=config,
    )
    measurement = object.__new__(Measurement)
    measurement.running = cast(RunningVariant, running)
    return measurement


def test_no_roofline_against_the_emulator() -> None:
    samples = {"decode_tok_s": [1200.0, 1250.0, 1300.0]}  # a configured delay, not a GPU's memory reads
    assert _measurement(emulated=True)._roofline(samples) == (None, EMULATOR_NOTE)
    roof, note = _measurement(emulated=False)._roofline(samples)
    assert note is None and roof is not None and roof.problem is not None  # on a GPU: computed, and flagged
