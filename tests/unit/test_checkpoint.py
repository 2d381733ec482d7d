"""What a checkpoint's config.json says, read through `CheckpointFacts` (the sizes: test_modelsize.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sglperf.model.checkpoint import VISION_CONFIG_KEYS, CheckpointFacts

from ..support.project import QWEN36_CONFIG

pytestmark = pytest.mark.selftest

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1000, "hidden_size": 64}


@pytest.fixture(scope="module")
def qwen36() -> CheckpointFacts:
    return CheckpointFacts.parse(QWEN36_CONFIG.read_bytes())


def test_a_multimodal_checkpoint_with_an_mtp_head(qwen36: CheckpointFacts) -> None:
    text = qwen36.config["text_config"]
    assert qwen36.architectures == ("Qwen3_5ForConditionalGeneration",)
    assert qwen36.vision_config_keys == ("vision_config",)
    assert not qwen36.moe
    assert qwen36.mtp_layers == text["mtp_num_hidden_layers"] == 1
    assert not qwen36.tied_embeddings
    assert qwen36.untied_embedding_params == text["vocab_size"] * text["hidden_size"]
    assert qwen36.size().source == "config.json"


def test_the_text_section_s_word_on_the_embedding_wins_over_the_top_level_s(qwen36: CheckpointFacts) -> None:
    config = dict(qwen36.config)
    text = config["text_config"]
    untied_text = CheckpointFacts({**config, "tie_word_embeddings": True})
    assert not untied_text.tied_embeddings and untied_text.untied_embedding_params > 0
    silent_text = {k: v for k, v in text.items() if k != "tie_word_embeddings"}
    assert CheckpointFacts({**config, "text_config": silent_text, "tie_word_embeddings": True}).tied_embeddings


def test_a_text_only_checkpoint() -> None:
    llama = CheckpointFacts(LLAMA)
    assert llama.vision_config_keys == () and llama.mtp_layers == 0 and not llama.moe
    assert llama.untied_embedding_params == 1000 * 64
    tied = CheckpointFacts({**LLAMA, "tie_word_embeddings": True})
    assert tied.tied_embeddings and tied.untied_embedding_params == 0
    assert CheckpointFacts({**LLAMA, "vocab_size": None}).untied_embedding_params == 0  # no shape, nothing counted


@pytest.mark.parametrize("key", VISION_CONFIG_KEYS)
def test_each_way_a_config_describes_a_vision_tower(key: str) -> None:
    assert CheckpointFacts({**LLAMA, key: {}}).vision_config_keys == (key,)


@pytest.mark.parametrize(
    "config",
    [
        {**LLAMA, "num_local_experts": 8},
        {"architectures": ["X"], "text_config": {"n_routed_experts": 64}},
    ],
)
def test_moe_and_mtp_keys_are_read_at_the_top_and_in_the_text_section(config: dict[str, Any]) -> None:
    assert CheckpointFacts(config).moe
    nextn = {"architectures": ["X"], "text_config": {"num_nextn_predict_layers": 1}, "mtp_num_hidden_layers": 2}
    assert CheckpointFacts(nextn).mtp_layers == 2


def test_a_fact_sglperf_cannot_count_fails_only_its_reader() -> None:
    """A config whose parameters cannot be counted still names its architectures and its vision tower."""
    facts = CheckpointFacts({"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "visual": {}})
    assert facts.architectures == ("LlavaForConditionalGeneration",)
    assert facts.vision_config_keys == ("visual",)
    with pytest.raises(ValueError, match="cannot count parameters"):
        facts.size()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "is not valid JSON"),
        (b"\xff", "is not valid JSON"),
        ("[]", "has no 'architectures' list"),
        (json.dumps({"architectures": []}), "has no 'architectures' list"),
        (json.dumps({"architectures": "LlamaForCausalLM"}), "has no 'architectures' list"),
    ],
)
def test_parse_says_what_a_config_json_is_not(text: str | bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        CheckpointFacts.parse(text)
