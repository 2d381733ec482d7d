"""Parameter counts from a HuggingFace ``config.json``, and what a server's weight memory says.

SGLang serves Qwen3.5/3.6 through a multimodal architecture class; whether the vision tower was
actually loaded shows only in the weight memory each GPU reports after loading. This module counts
the parameters of each part and compares a measurement against the expectations.

Layouts follow HF transformers (``modeling_qwen3_5.py``, ``modeling_qwen3_next.py``,
``modeling_qwen3_vl.py``) and SGLang's ``qwen3_5_mtp.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sglperf.model.files import GIB

# Below this a loaded vision tower cannot be told apart from allocator noise.
MIN_GAP_GIB = 0.05
# Further than this from every expectation, the estimate does not describe the checkpoint.
MAX_RELATIVE_ERROR = 0.10

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
SUPPORTED = "Qwen3.5/3.6 (model_type 'qwen3_5') or a Llama/Qwen2/Qwen3-style dense text config"


@dataclass(frozen=True)
class ModelSize:
    """Parameters per part; ``mtp_replicated_params`` is the share of MTP every TP rank holds whole."""

    text_params: int
    vision_params: int
    mtp_params: int
    dtype_bytes: int
    mtp_replicated_params: int = 0

    @property
    def total_params(self) -> int:
        return self.text_params + self.vision_params + self.mtp_params

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


def _missing(keys: str) -> ValueError:
    return ValueError(f"config.json: cannot count parameters, missing keys: {keys} (supported: {SUPPORTED})")


class _Reader:
    """Reads config keys, collecting every missing one so a single error names them all."""

    def __init__(self) -> None:
        self.missing: list[str] = []

    def need(self, section: Mapping[str, Any], key: str, where: str) -> int:
        value = section.get(key)
        if value is None:
            if f"{where}{key}" not in self.missing:  # every layer asks again
                self.missing.append(f"{where}{key}")
            return 0
        return int(value)

    def check(self) -> None:
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
    kv_heads = t.get("num_key_value_heads") or heads
    head_dim = t.get("head_dim") or (hidden // heads if heads else 0)
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
    if layer_types is None:
        count = r.need(t, "num_hidden_layers", where)
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
    mtp_layers = t.get("mtp_num_hidden_layers", 0) or 0
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
    channels = v.get("in_channels", 3)
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

    deepstack = len(v.get("deepstack_visual_indexes") or [])
    return int(
        patch_embed
        + pos_embed
        + r.need(v, "depth", where) * block
        + merger(hidden)  # normalises before the spatial shuffle
        + deepstack * merger(merged)  # deepstack mergers normalise after it
    )


def _dense_text(c: Mapping[str, Any], r: _Reader) -> int:
    """Llama/Qwen2/Qwen3-style decoder: attention, gated MLP, two RMSNorms per layer."""
    hidden = r.need(c, "hidden_size", "")
    vocab = r.need(c, "vocab_size", "")
    intermediate = r.need(c, "intermediate_size", "")
    layers = r.need(c, "num_hidden_layers", "")
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
    tied = bool(c.get("tie_word_embeddings", False))
    return vocab * hidden * (1 if tied else 2) + layers * per_layer + hidden


def model_size(config: Mapping[str, Any]) -> ModelSize:
    """Count parameters per part; ValueError names missing keys or an unsupported shape."""
    if config.get("quantization_config"):
        raise ValueError("config.json: quantized checkpoints are not supported (bytes per parameter vary)")
    text_cfg = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else None
    for section in (config, text_cfg or {}):
        if any(section.get(key) for key in MOE_KEYS):
            raise ValueError(f"config.json: mixture-of-experts models are not supported (supported: {SUPPORTED})")

    r = _Reader()
    model_type = config.get("model_type")
    if model_type == "qwen3_5_text":  # a text-only export of the hybrid decoder
        text, mtp, mtp_replicated = _qwen3_5_text(config, bool(config.get("tie_word_embeddings", False)), r, "")
        r.check()
        return ModelSize(text, 0, mtp, _dtype_bytes(("", config)), mtp_replicated)
    if model_type == "qwen3_5":
        if text_cfg is None:
            raise _missing("text_config")
        tied = bool(text_cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
        text, mtp, mtp_replicated = _qwen3_5_text(text_cfg, tied, r, "text_config.")
        vision_cfg = config.get("vision_config")
        vision = _qwen3_vision(vision_cfg, r) if isinstance(vision_cfg, Mapping) else 0
        r.check()
        return ModelSize(text, vision, mtp, _dtype_bytes(("text_config.", text_cfg), ("", config)), mtp_replicated)
    if text_cfg is not None or "vision_config" in config:
        raise ValueError(f"config.json: model_type {model_type!r} is not supported (supported: {SUPPORTED})")

    text = _dense_text(config, r)
    r.check()
    return ModelSize(text, 0, 0, _dtype_bytes(("", config)))


VisionFinding = Literal["skipped", "loaded", "unclear"]


@dataclass(frozen=True)
class VisionEvidence:
    """What a weight-memory measurement says about the vision tower."""

    verdict: VisionFinding
    measured_gib: float
    text_only_gib: float
    vision_sharded_gib: float
    vision_replicated_gib: float
    mtp_loaded: bool
    detail: str


def classify_weight_memory(
    measured_gib_per_gpu: float, size: ModelSize, tp: int, *, mtp_loaded: bool = False
) -> VisionEvidence:
    """Decide by the midpoint between text-only and the smallest with-vision expectation."""
    text_only = size.weight_gib_per_gpu(tp, vision=False, vision_replicated=False, mtp=mtp_loaded)
    sharded = size.weight_gib_per_gpu(tp, vision=True, vision_replicated=False, mtp=mtp_loaded)
    replicated = size.weight_gib_per_gpu(tp, vision=True, vision_replicated=True, mtp=mtp_loaded)
    smallest = min(sharded, replicated)
    gap = smallest - text_only
    m = measured_gib_per_gpu

    expectations = (text_only, sharded, replicated)
    if gap < MIN_GAP_GIB:
        verdict: VisionFinding = "unclear"
        why = f"vision tower adds only {gap:.3f} GiB/GPU at tp={tp}: too small to tell"
    elif all(abs(m - e) > MAX_RELATIVE_ERROR * e for e in expectations):
        verdict = "unclear"
        why = f"over {MAX_RELATIVE_ERROR:.0%} from every expectation: the estimate does not describe this checkpoint"
    elif m >= (text_only + smallest) / 2:
        verdict, why = "loaded", "vision tower loaded"
    else:
        verdict, why = "skipped", "vision tower skipped"

    mtp_note = " (incl. MTP layer)" if mtp_loaded else ""
    detail = (
        f"weights {m:.2f} GiB/GPU: text-only {text_only:.2f}, with vision tower {sharded:.2f}-{replicated:.2f}"
        f"{mtp_note} -> {why}"
    )
    return VisionEvidence(verdict, m, text_only, sharded, replicated, mtp_loaded, detail)
