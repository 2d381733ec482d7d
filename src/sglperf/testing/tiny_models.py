"""Tiny random-weight Hugging Face model folders for a real SGLang server on the CPU.

Standalone: run it with an interpreter that has ``tokenizers`` and ``transformers`` (any SGLang
environment has both; the harness's own venv need not). The configs are standard library only, so
the harness (and the selftest checking the configs preflight resolves against) imports this module
without them. No weights are written: the server runs with ``--load-format dummy``.

Each folder: ``config.json``, ``generation_config.json`` and a byte-level BPE tokenizer trained here on
a fixed word list (vocab 1024 with Qwen-style specials), saved through
``transformers.PreTrainedTokenizerFast.save_pretrained`` with a ChatML chat template.

    python tiny_models.py OUTDIR [KIND ...]      # kinds: tiny-qwen3 tiny-mimo tiny-qwen35
    python -m sglperf.testing.tiny_models --ensure PYTHON [CACHE]  # once per version; CACHE: default_cache()

- ``tiny-qwen3``: Qwen3ForCausalLM, hidden 128, 4 layers (EAGLE3 taps layers 0-2), with an EAGLE3 draft
  (LlamaForCausalLMEagle3, 1 layer) in ``tiny-qwen3/eagle3-draft``.
- ``tiny-mimo``: MiMoForCausalLM (Qwen2 body) with one MTP layer: speculative ``NEXTN``.
- ``tiny-qwen35``: Qwen3_5ForConditionalGeneration (3 linear-attention + 1 full-attention layer, a
  one-block vision tower, one MTP layer), shaped like Qwen3.6-27B.
"""

from __future__ import annotations

import importlib
import json
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

VOCAB = 1024
HIDDEN = 128
EAGLE3_DRAFT = "eagle3-draft"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# The order fixes the ids (0, 1, ...).
SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
EOS_ID, IM_END_ID = 0, 2
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "a",
    "small",
    "model",
    "answers",
    "every",
    "question",
    "about",
    "speculative",
    "decoding",
    "prefill",
    "decode",
    "latency",
    "throughput",
    "tokens",
    "per",
    "second",
    "batch",
    "size",
    "cache",
    "memory",
    "graph",
    "capture",
    "server",
    "client",
    "request",
    "response",
    "stream",
    "chunk",
    "hello",
    "world",
    "user",
    "assistant",
    "system",
    "please",
    "write",
    "a",
    "short",
    "poem",
    "story",
    "list",
    "numbers",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "zero",
    "benchmark",
    "regression",
    "performance",
    "test",
    "suite",
    "compare",
    "emulator",
    "def",
    "return",
    "import",
    "class",
    "for",
    "in",
    "if",
    "else",
    "print",
]


def _corpus(lines: int = 4000) -> Iterator[str]:
    rng = random.Random(0)
    for _ in range(lines):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30)))
        yield words + rng.choice([".", "?", "!", ",", ""]) + " " + str(rng.randint(0, 9999))


def _decoder(num_layers: int) -> dict[str, Any]:
    return {
        "hidden_size": HIDDEN,
        "intermediate_size": 256,
        "num_hidden_layers": num_layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": VOCAB,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": EOS_ID,
        "eos_token_id": IM_END_ID,
        "pad_token_id": EOS_ID,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
    }


def qwen3_config() -> dict[str, Any]:
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **_decoder(4)}


def eagle3_draft_config() -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        **_decoder(1),
        "draft_vocab_size": VOCAB,
        "target_hidden_size": HIDDEN,
        # aux hidden states taken at the input of target layers 1, 2, 3
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2], "use_aux_hidden_state": True},
    }


def mimo_config() -> dict[str, Any]:
    common = _decoder(2)
    common.pop("head_dim")  # Qwen2 derives it: hidden / heads = 32
    return {
        "architectures": ["MiMoForCausalLM"],
        "model_type": "qwen2",
        **common,
        "attention_bias": True,
        "num_nextn_predict_layers": 1,
        "use_sliding_window": False,
    }


def qwen35_config() -> dict[str, Any]:
    layer_types = ["linear_attention"] * 3 + ["full_attention"]
    text = {
        "model_type": "qwen3_5_text",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "bos_token_id": EOS_ID,
        "eos_token_id": IM_END_ID,
        "dtype": "bfloat16",
        "full_attention_interval": 4,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": 256,
        "layer_types": layer_types,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 64,  # SGLang's CPU GatedDeltaNet kernel: head dim 64 or 128 only
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_value_head_dim": 64,
        "mamba_ssm_dtype": "float32",
        "max_position_embeddings": 4096,
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "num_attention_heads": 4,
        "num_hidden_layers": len(layer_types),
        "num_key_value_heads": 2,
        "output_gate_type": "swish",
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": [4, 2, 2],
            "partial_rotary_factor": 0.25,
            "rope_theta": 10000000,
            "rope_type": "default",
        },
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": VOCAB,
    }
    vision = {
        "model_type": "qwen3_5",
        "deepstack_visual_indexes": [],
        "depth": 1,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 64,
        "in_channels": 3,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "num_heads": 2,
        "num_position_embeddings": 2304,
        "out_hidden_size": HIDDEN,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    }
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "image_token_id": SPECIALS.index("<|image_pad|>"),
        "video_token_id": SPECIALS.index("<|video_pad|>"),
        "vision_start_token_id": SPECIALS.index("<|vision_start|>"),
        "vision_end_token_id": SPECIALS.index("<|vision_end|>"),
        "language_model_only": False,
        "tie_word_embeddings": False,
        "text_config": text,
        "vision_config": vision,
    }


def _processor_configs() -> dict[str, dict[str, Any]]:
    common = {
        "processor_class": "Qwen3VLProcessor",
        "do_resize": True,
        "do_rescale": True,
        "do_normalize": True,
        "do_convert_rgb": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "rescale_factor": 0.00392156862745098,
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
    }
    return {
        "preprocessor_config.json": {
            "image_processor_type": "Qwen2VLImageProcessorFast",
            **common,
            "size": {"shortest_edge": 65536, "longest_edge": 16777216},
        },
        "video_preprocessor_config.json": {
            "video_processor_type": "Qwen3VLVideoProcessor",
            **common,
            "size": {"shortest_edge": 4096, "longest_edge": 25165824},
        },
    }


def configs(kind: str) -> dict[str, dict[str, Any]]:
    """Every JSON file of a model folder but the tokenizer's: relative path -> content."""
    generation = {"eos_token_id": [IM_END_ID, EOS_ID], "pad_token_id": EOS_ID, "do_sample": False}
    if kind == "tiny-qwen3":
        return {
            "config.json": qwen3_config(),
            "generation_config.json": generation,
            f"{EAGLE3_DRAFT}/config.json": eagle3_draft_config(),
            f"{EAGLE3_DRAFT}/generation_config.json": generation,
        }
    if kind == "tiny-mimo":
        return {"config.json": mimo_config(), "generation_config.json": generation}
    if kind == "tiny-qwen35":
        return {"config.json": qwen35_config(), "generation_config.json": generation, **_processor_configs()}
    raise ValueError(f"unknown tiny model {kind!r}; known: {', '.join(KINDS)}")


KINDS = ("tiny-qwen3", "tiny-mimo", "tiny-qwen35")


def dump(obj: dict[str, Any]) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def train_tokenizer(out: Path) -> None:
    tokenizers: Any = importlib.import_module("tokenizers")
    transformers: Any = importlib.import_module("transformers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=list(SPECIALS),
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    if tok.get_vocab_size() > VOCAB:
        raise RuntimeError(f"tokenizer vocabulary {tok.get_vocab_size()} > {VOCAB}")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIALS[1:]),
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 4096
    fast.save_pretrained(str(out))


def write(root: Path, kinds: tuple[str, ...] = KINDS) -> list[Path]:
    """Write the model folders under ``root`` (replacing them); returns their paths."""
    root.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = Path(tmp) / "tokenizer"
        train_tokenizer(tokenizer)
        for kind in kinds:
            files = configs(kind)
            staging = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=root))
            for folder in {Path(rel).parent for rel in files}:
                shutil.copytree(tokenizer, staging / folder, dirs_exist_ok=True)
            for rel, content in files.items():
                (staging / rel).write_text(dump(content))
            final = root / kind
            if final.exists():
                shutil.rmtree(final)
            staging.rename(final)
            written.append(final)
    return written


# The deployments' served_path names the models' folder through this variable ("${SGLPERF_TINY_MODELS}/tiny-qwen3").
TINY_MODELS_ENV = "SGLPERF_TINY_MODELS"


def default_cache() -> Path:
    """Where the tests, the benches and ci/cpu-env.sh keep the tiny models."""
    from sglperf.sglang import envs  # not at the top: this file also runs inside SGLang's environment

    return envs.home() / "tiny-models"


def ensure(python: str, cache: Path) -> Path:
    """The folder holding every tiny model, written once per version of this file under ``cache`` by
    ``python`` (an interpreter with tokenizers and transformers, e.g. a managed SGLang environment)."""
    import hashlib
    import subprocess

    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    root = cache / f"tiny-models-{digest}"
    marker = root / ".complete"
    if marker.is_file():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-models-", dir=cache))
    proc = subprocess.run([python, __file__, str(staging)], capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"writing the tiny models with {python} failed:\n{proc.stderr[-2000:]}")
    (staging / ".complete").write_text("ok\n")
    try:
        staging.rename(root)
    except OSError:  # written meanwhile by another process
        shutil.rmtree(staging, ignore_errors=True)
    return root


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "--ensure":  # --ensure PYTHON [CACHE]: print the folder, writing it if needed
        print(ensure(argv[1], Path(argv[2]) if len(argv) > 2 else default_cache()))
        return 0
    for path in write(Path(argv[0]), tuple(argv[1:]) or KINDS):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
