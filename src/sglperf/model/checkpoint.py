"""What a checkpoint's ``config.json`` says about the model, read in one place: `CheckpointFacts`.

Its architectures, whether it describes a vision tower, mixture-of-experts layers, an MTP head, whether
the input embedding is tied to the LM head, and the parameters of each part (text, vision tower, MTP) with
the bytes each takes. The deployment loader, `sglperf init`, the intents, the roofline, the live evidence
and the emulator's weight memory all read config.json through it.

Each fact is read when asked for, from the parsed config, so a key sglperf cannot read fails only the
caller that needs it: a config whose parameters cannot be counted still names its architectures.

Parameter counts follow HF transformers (``modeling_qwen3_5.py``, ``modeling_qwen3_next.py``,
``modeling_qwen3_vl.py``) and SGLang's ``qwen3_5_mtp.py``, for those families only. What one GPU of a
server holds, `GpuWeights`, comes from the better of two sources (`gpu_weights`): the model class the
release itself builds for the variant on the meta device (preflight's `ModelFacts`: any architecture
SGLang serves, exact per tensor-parallel rank), else config.json counted here, saying why.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sglperf.model.files import GIB
from sglperf.model.resolution import ModelFacts

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
# Keys of an MTP head (DeepSeek V3 / MiMo / GLM: num_nextn_predict_layers; Qwen3.5 and 3.6:
# mtp_num_hidden_layers), at the top or in text_config.
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
# Where a checkpoint config describes a vision tower (Qwen-VL and Qwen3.5: vision_config; some
# Llava-style configs: vision_tower, mm_vision_tower; Qwen-VL 1: visual).
VISION_CONFIG_KEYS = ("vision_config", "vision_tower", "mm_vision_tower", "visual")
SUPPORTED = "Qwen3.5/3.6 (model_type 'qwen3_5') or a Llama/Qwen2/Qwen3-style dense text config"
# Bounds a size is read within: a key past them describes no model (and a layer count of 10**15 would
# build its layer list for ever).
MAX_SIZE_VALUE = 2**40
MAX_LAYERS = 100_000
# Where a model's sizes came from: counted from config.json here, or the model class the SGLang release
# builds for the variant on the meta device (preflight's ModelFacts).
SizeSource = Literal["config.json", "model build"]


@dataclass(frozen=True)
class ModelSize:
    """Parameters per part; ``mtp_replicated_params`` is the share of MTP every TP rank holds whole."""

    text_params: int
    vision_params: int
    mtp_params: int
    dtype_bytes: int
    mtp_replicated_params: int = 0
    source: SizeSource = "config.json"

    @property
    def total_params(self) -> int:
        return self.text_params + self.vision_params + self.mtp_params

    @property
    def weight_gib(self) -> float:
        """Every part's weights (text, vision tower, MTP) together."""
        return self.total_params * self.dtype_bytes / GIB

    def weight_gib_per_gpu(self, tp: int, *, vision: bool, vision_replicated: bool, mtp: bool = False) -> float:
        """Expected weight memory on one of ``tp`` GPUs (text is always sharded)."""
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        params = self.text_params / tp
        if vision:
            params += self.vision_params if vision_replicated else self.vision_params / tp
        if mtp:
            sharded = self.mtp_params - self.mtp_replicated_params
            params += sharded / tp + self.mtp_replicated_params
        return params * self.dtype_bytes / GIB

    def per_gpu(self, tp: int, why: str) -> GpuWeights:
        """One GPU's share at ``tp``, every part sharded (`weight_gib_per_gpu`'s estimate); ``why``: why
        config.json counted it and not a model build."""
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        sharded = self.mtp_params - self.mtp_replicated_params
        return GpuWeights(
            tp=tp,
            text_bytes=round(self.text_params * self.dtype_bytes / tp),
            vision_bytes=round(self.vision_params * self.dtype_bytes / tp),
            vision_built=None,
            draft_bytes=round((sharded / tp + self.mtp_replicated_params) * self.dtype_bytes),
            source="config.json",
            detail=f"counted from config.json ({why})" if why else "counted from config.json",
        )


@dataclass(frozen=True)
class GpuWeights:
    """The weight bytes one GPU of a server holds at one tensor-parallel size, by part, and their source.

    SGLang's own figure for a server (``memory_usage.weight``, the "Load weight end" line) is the target
    model's: ``text_bytes`` plus ``vision_bytes`` where the tower is built. The draft (an MTP head or a
    draft model) loads afterwards, in its own model runner, and is not in it."""

    tp: int
    text_bytes: int  # the language model: its layers, embedding and LM head
    vision_bytes: int  # the vision tower (0: none); config.json: its size, built or not
    vision_built: bool | None  # whether the variant's model class builds the tower; None: config.json cannot tell
    draft_bytes: int  # the MTP head or draft model, as a draft (0: none built or counted)
    source: SizeSource
    detail: str  # where the numbers came from, for a person

    @classmethod
    def built(cls, model: ModelFacts, tp: int) -> GpuWeights:
        """SGLang's model class as preflight built it for the variant (tensor-parallel rank 0 at ``tp``)."""
        return cls(
            tp=tp,
            text_bytes=model.param_bytes_per_rank - model.vision_param_bytes_per_rank,
            vision_bytes=model.vision_param_bytes_per_rank,
            vision_built=model.vision_tower is not None,
            draft_bytes=model.draft_param_bytes_per_rank,
            source="model build",
            detail=f"SGLang's {model.architecture}, built on the meta device (TP rank 0 of {tp})",
        )

    @property
    def model_gib(self) -> float:
        """The target model's weights (text and vision tower) on this GPU, in GiB."""
        return (self.text_bytes + self.vision_bytes) / GIB


def gpu_weights(
    checkpoint: CheckpointFacts,
    model: ModelFacts | None,
    model_error: str | None,
    tp: int,
    no_build: str = "preflight built no model",
) -> GpuWeights:
    """One GPU's weights for a variant at ``tp``: from the release's own model build when preflight built
    it (``model``), else counted from config.json, saying why (``model_error``, else ``no_build``);
    ValueError naming both when neither can."""
    if model is not None and model.param_bytes_per_rank > 0:
        return GpuWeights.built(model, tp)
    why = f"SGLang's model build failed: {model_error}" if model_error else no_build
    try:
        return checkpoint.size().per_gpu(tp, why)
    except ValueError as exc:
        raise ValueError(f"{why}; and {exc}") from None


@dataclass(frozen=True)
class CheckpointFacts:
    """What a checkpoint's config.json says; ``config`` is the parsed file, read through the properties."""

    config: Mapping[str, Any]

    @classmethod
    def parse(cls, text: str | bytes) -> CheckpointFacts:
        """A model's config.json as preflight needs it: a JSON object naming its architectures; ValueError
        says which of the two it is not."""
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise ValueError(f"is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("architectures"), list) or not data["architectures"]:
            raise ValueError("has no 'architectures' list")
        return cls(data)

    @property
    def architectures(self) -> tuple[str, ...]:
        return tuple(map(str, self.config.get("architectures") or ()))

    @property
    def _text_config(self) -> Mapping[str, Any] | None:
        """A multimodal config's text section (``text_config``), None for a text-only config."""
        text = self.config.get("text_config")
        return text if isinstance(text, Mapping) else None

    @property
    def _sections(self) -> tuple[Mapping[str, Any], ...]:
        """Where a model-wide key may be: the top level, and the text section of a multimodal config."""
        text = self._text_config
        return (self.config,) if text is None else (self.config, text)

    @property
    def vision_config_keys(self) -> tuple[str, ...]:
        """The keys describing a vision tower this config has (none: a text-only checkpoint)."""
        return tuple(key for key in VISION_CONFIG_KEYS if key in self.config)

    @property
    def moe(self) -> bool:
        return any(section.get(key) for section in self._sections for key in MOE_KEYS)

    @property
    def mtp_layers(self) -> int:
        """The MTP head's layers, 0 without one; ValueError names a key that is not a layer count."""
        counts = [0]
        for prefix, section in zip(("", "text_config."), self._sections):
            for key in MTP_KEYS:
                value = section.get(key)
                if value is not None and not _whole(value, MAX_LAYERS):
                    raise ValueError(f"config.json: {prefix}{key}: {value!r} is not a number of layers")
                counts.append(value or 0)
        return max(counts)

    @property
    def linear_attention(self) -> bool:
        """Whether layers keep a recurrent (Mamba or linear-attention) state, as Qwen3.5's GatedDeltaNet layers
        do: SGLang's mamba cache settings act only on such models."""
        return any(
            any("linear" in str(kind) or "mamba" in str(kind) for kind in section.get("layer_types") or ())
            or any(key.startswith(("mamba_", "ssm_", "linear_num_")) for key in section)
            for section in self._sections
        )

    @property
    def sliding_window(self) -> bool:
        """Whether some layers attend within a sliding window: SGLang's SWA pool settings act only there."""
        return any(
            section.get("sliding_window") or any("sliding" in str(kind) for kind in section.get("layer_types") or ())
            for section in self._sections
        )

    @property
    def tied_embeddings(self) -> bool:
        """Whether the input embedding is the LM head's matrix (the text section's word, else the top's)."""
        text = self._text_config or {}
        return bool(text.get("tie_word_embeddings", self.config.get("tie_word_embeddings", False)))

    @property
    def untied_embedding_params(self) -> int:
        """The input embedding table's parameters when it is not tied to the LM head, else 0 (also when the
        config does not give its shape)."""
        text = self._text_config
        text = self.config if text is None else text
        vocab, hidden = text.get("vocab_size"), text.get("hidden_size")
        if self.tied_embeddings or not isinstance(vocab, int) or not isinstance(hidden, int):
            return 0
        return vocab * hidden

    def size(self) -> ModelSize:
        """Count parameters per part; ValueError names missing keys or an unsupported shape."""
        config = self.config
        if config.get("quantization_config"):
            raise ValueError("config.json: quantized checkpoints are not supported (bytes per parameter vary)")
        if self.moe:
            raise ValueError(f"config.json: mixture-of-experts models are not supported (supported: {SUPPORTED})")

        r = _Reader()
        model_type = config.get("model_type")
        text_cfg = self._text_config
        if model_type == "qwen3_5_text":  # a text-only export of the hybrid decoder: the config is its text
            text, mtp, mtp_replicated = _qwen3_5_text(config, bool(config.get("tie_word_embeddings", False)), r, "")
            r.check()
            return ModelSize(text, 0, mtp, _dtype_bytes(("", config)), mtp_replicated)
        if model_type == "qwen3_5":
            if text_cfg is None:
                raise _missing("text_config")
            text, mtp, mtp_replicated = _qwen3_5_text(text_cfg, self.tied_embeddings, r, "text_config.")
            vision_cfg = config.get("vision_config")
            vision = _qwen3_vision(vision_cfg, r) if isinstance(vision_cfg, Mapping) else 0
            r.check()
            return ModelSize(text, vision, mtp, _dtype_bytes(("text_config.", text_cfg), ("", config)), mtp_replicated)
        if text_cfg is not None or "vision_config" in config:
            raise ValueError(f"config.json: model_type {model_type!r} is not supported (supported: {SUPPORTED})")

        text = _dense_text(config, self.tied_embeddings, r)
        r.check()
        return ModelSize(text, 0, 0, _dtype_bytes(("", config)))


def _missing(keys: str) -> ValueError:
    return ValueError(f"config.json: cannot count parameters, missing keys: {keys} (supported: {SUPPORTED})")


def _whole(value: Any, most: int) -> bool:
    """Whether a config value is a whole number from 0 to ``most`` (JSON's true is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most


class _Reader:
    """Reads config keys, collecting every missing or unreadable one so a single error names them all."""

    def __init__(self) -> None:
        self.missing: list[str] = []
        self.unreadable: list[str] = []

    def need(self, section: Mapping[str, Any], key: str, where: str, most: int = MAX_SIZE_VALUE) -> int:
        value = section.get(key)
        if value is None:
            if f"{where}{key}" not in self.missing:  # every layer asks again
                self.missing.append(f"{where}{key}")
            return 0
        return self._checked(value, key, where, most)

    def optional(self, section: Mapping[str, Any], key: str, where: str, default: int) -> int:
        """A key a config may leave out (or write as null, or 0): ``default`` then."""
        value = section.get(key)
        if value is None:
            return default
        return self._checked(value, key, where, MAX_SIZE_VALUE) or default

    def _checked(self, value: Any, key: str, where: str, most: int) -> int:
        if _whole(value, most):
            return int(value)
        said = f"{where}{key} = {value!r}"
        if said not in self.unreadable:
            self.unreadable.append(said[:120])
        return 0

    def check(self) -> None:
        if self.unreadable:
            raise ValueError(f"config.json: cannot count parameters, not whole numbers: {', '.join(self.unreadable)}")
        if self.missing:
            raise _missing(", ".join(self.missing))


def _dtype_bytes(*sections: tuple[str, Mapping[str, Any]]) -> int:
    """Bytes per parameter from the first section that names a dtype: (prefix, section) pairs."""
    for _, section in sections:
        name = section.get("dtype") or section.get("torch_dtype")
        if name is None:
            continue
        if str(name) not in DTYPE_BYTES:
            raise ValueError(f"config.json: dtype {name!r} is not one of {', '.join(DTYPE_BYTES)}")
        return DTYPE_BYTES[str(name)]
    keys = " / ".join(f"{prefix}{key}" for prefix, _ in sections for key in ("dtype", "torch_dtype"))
    raise ValueError(f"config.json: cannot count bytes, missing keys: {keys}")


def _linear(n_in: int, n_out: int, bias: bool = False) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _gated_mlp(hidden: int, intermediate: int, bias: bool = False) -> int:
    return 2 * _linear(hidden, intermediate, bias) + _linear(intermediate, hidden, bias)


def _gated_delta_net(t: Mapping[str, Any], r: _Reader, where: str) -> int:
    """Qwen3.5 GatedDeltaNet: in_proj_qkv/z/b/a, depthwise conv1d, A_log, dt_bias, gated norm, out_proj."""
    hidden = r.need(t, "hidden_size", where)
    key_dim = r.need(t, "linear_num_key_heads", where) * r.need(t, "linear_key_head_dim", where)
    v_heads = r.need(t, "linear_num_value_heads", where)
    v_head_dim = r.need(t, "linear_value_head_dim", where)
    value_dim = v_heads * v_head_dim
    conv_dim = 2 * key_dim + value_dim
    return (
        _linear(hidden, conv_dim)  # in_proj_qkv (Qwen3-Next fuses it with z as in_proj_qkvz: same count)
        + _linear(hidden, value_dim)  # in_proj_z
        + 2 * _linear(hidden, v_heads)  # in_proj_b, in_proj_a
        + conv_dim * r.need(t, "linear_conv_kernel_dim", where)  # conv1d, depthwise, no bias
        + 2 * v_heads  # A_log, dt_bias
        + v_head_dim  # norm (gated RMSNorm over one head)
        + _linear(value_dim, hidden)  # out_proj
    )


def _attention(
    t: Mapping[str, Any], r: _Reader, where: str, *, output_gate: bool, qk_norm: bool, qkv_bias: bool, o_bias: bool
) -> int:
    hidden = r.need(t, "hidden_size", where)
    heads = r.need(t, "num_attention_heads", where)
    kv_heads = r.optional(t, "num_key_value_heads", where, heads)
    head_dim = r.optional(t, "head_dim", where, hidden // heads if heads else 0)
    q_out = heads * head_dim * (2 if output_gate else 1)  # the output gate rides on q_proj
    return (
        _linear(hidden, q_out, qkv_bias)
        + 2 * _linear(hidden, kv_heads * head_dim, qkv_bias)
        + _linear(heads * head_dim, hidden, o_bias)
        + (2 * head_dim if qk_norm else 0)
    )


def _qwen3_5_text(t: Mapping[str, Any], tied: bool, r: _Reader, where: str) -> tuple[int, int, int]:
    """(text, mtp, mtp replicated) parameters of the hybrid decoder."""
    hidden = r.need(t, "hidden_size", where)
    vocab = r.need(t, "vocab_size", where)
    intermediate = r.need(t, "intermediate_size", where)
    layer_types = t.get("layer_types")
    if layer_types is not None and (not isinstance(layer_types, list) or len(layer_types) > MAX_LAYERS):
        raise ValueError(f"config.json: {where}layer_types: not a list of at most {MAX_LAYERS} layer types")
    if layer_types is None:
        count = r.need(t, "num_hidden_layers", where, most=MAX_LAYERS)
        interval = r.need(t, "full_attention_interval", where) or 1
        layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(count)]
    bias = bool(t.get("attention_bias", False))
    gate = bool(t.get("attn_output_gate", True))

    def full_layer() -> int:
        attention = _attention(t, r, where, output_gate=gate, qk_norm=True, qkv_bias=bias, o_bias=bias)
        return attention + _gated_mlp(hidden, intermediate)

    layers = 0
    for kind in layer_types:
        if kind == "linear_attention":
            layers += _gated_delta_net(t, r, where) + _gated_mlp(hidden, intermediate)
        elif kind == "full_attention":
            layers += full_layer()
        else:
            raise ValueError(f"config.json: {where}layer_types: unknown layer type {kind!r}")
        layers += 2 * hidden  # input_layernorm, post_attention_layernorm

    embeddings = vocab * hidden * (1 if tied else 2)
    text = embeddings + layers + hidden  # final norm

    # MTP shares the target's embeddings and lm_head once loaded; its fc is a plain nn.Linear in SGLang,
    # so every TP rank keeps all of it.
    mtp_layers = r.optional(t, "mtp_num_hidden_layers", where, 0)
    if not mtp_layers:
        return text, 0, 0
    fc = _linear(2 * hidden, hidden)
    mtp = fc + 3 * hidden + mtp_layers * (full_layer() + 2 * hidden)  # pre_fc norms x2, final norm
    return text, mtp, fc


def _qwen3_vision(v: Mapping[str, Any], r: _Reader) -> int:
    """Qwen3-VL/Qwen3.5 vision tower: Conv3d patch embed, learned positions, blocks, patch merger(s)."""
    where = "vision_config."
    hidden = r.need(v, "hidden_size", where)
    intermediate = r.need(v, "intermediate_size", where)
    patch = r.need(v, "patch_size", where)
    merge = r.need(v, "spatial_merge_size", where)
    out_hidden = r.need(v, "out_hidden_size", where)
    channels = r.optional(v, "in_channels", where, 3)
    patch_embed = channels * r.need(v, "temporal_patch_size", where) * patch * patch * hidden + hidden
    pos_embed = r.need(v, "num_position_embeddings", where) * hidden
    block = (
        _linear(hidden, 3 * hidden, True)  # attn.qkv
        + _linear(hidden, hidden, True)  # attn.proj
        + _linear(hidden, intermediate, True)  # mlp.linear_fc1
        + _linear(intermediate, hidden, True)  # mlp.linear_fc2
        + 2 * 2 * hidden  # norm1, norm2: LayerNorm with bias
    )
    merged = hidden * merge * merge

    def merger(norm_dim: int) -> int:
        return 2 * norm_dim + _linear(merged, merged, True) + _linear(merged, out_hidden, True)

    indexes = v.get("deepstack_visual_indexes") or []
    deepstack = len(indexes) if isinstance(indexes, list) else r.need(v, "deepstack_visual_indexes", where)
    return int(
        patch_embed
        + pos_embed
        + r.need(v, "depth", where) * block
        + merger(hidden)  # normalises before the spatial shuffle
        + deepstack * merger(merged)  # deepstack mergers normalise after it
    )


def _dense_text(c: Mapping[str, Any], tied: bool, r: _Reader) -> int:
    """Llama/Qwen2/Qwen3-style decoder: attention, gated MLP, two RMSNorms per layer."""
    hidden = r.need(c, "hidden_size", "")
    vocab = r.need(c, "vocab_size", "")
    intermediate = r.need(c, "intermediate_size", "")
    layers = r.need(c, "num_hidden_layers", "", most=MAX_LAYERS)
    r.need(c, "num_attention_heads", "")
    r.check()
    model_type = c.get("model_type", "")
    bias = bool(c.get("attention_bias", False))
    # Qwen2 has q/k/v biases (not on o_proj) whatever attention_bias says; Qwen3 adds per-head q/k norms.
    qwen2 = model_type == "qwen2"
    attention = _attention(
        c, r, "", output_gate=False, qk_norm=model_type == "qwen3", qkv_bias=qwen2 or bias, o_bias=bias and not qwen2
    )
    per_layer = attention + _gated_mlp(hidden, intermediate, bool(c.get("mlp_bias", False))) + 2 * hidden
    return vocab * hidden * (1 if tied else 2) + layers * per_layer + hidden
