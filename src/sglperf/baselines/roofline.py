"""Decode roofline per variant: how close single-stream decode is to the GPU's memory bandwidth.

At batch sizes a decode server runs single streams at, every decode step reads every weight the
step uses once from GPU memory, and the step cannot finish faster than that read. With tensor
parallelism each GPU reads its own shard at the same time, so per GPU:

    decode tok/s limit = memory bandwidth per GPU / weight bytes read per step per GPU
                         x tokens per step

Tokens per step is 1 without speculative decoding and the measured acceptance length (tokens per
verify step) with it: one verify pass reads the target weights once and yields that many tokens.
"x% of roofline" is the measured per-stream decode tok/s (median over rounds) over that limit.

Weight bytes read per step per GPU: the target model's parameters held by tensor-parallel rank 0,
from the model class SGLang builds in preflight (`Resolution.model.param_bytes_per_rank`) when
preflight built it, else counted from config.json (`sglperf.model.checkpoint`), minus what decode
does not read: the vision tower (text decoding never runs it) and, when the input embedding is not
tied to the LM head, the embedding table (decode reads one row per token, not the table).

What the limit leaves out, so the true limit is lower and 100% is out of reach:

* KV-cache (and linear-attention state) reads, which grow with the context;
* activations, the LM head's logits and sampling, kernel launch gaps;
* tensor-parallel communication (all-reduce per layer);
* the MTP / draft model's own weights: each of the ``num_steps`` draft passes reads the draft layer
  (and with a shared LM head, the LM head) again. Not counted, because whether SGLang shares the
  LM head and embedding with the draft differs by model and release; with MTP the computed limit is
  therefore higher than the true one, and the fraction understates how close decode is to it.

Every term left out lowers the true limit, so a measured rate above the computed limit is not a
fast server: it says an input (bandwidth, weight bytes per step, tokens per step) or the
measurement itself is wrong. Such a record carries ``problem`` naming the inputs, and its fraction
is not shown as a hardware figure. The emulator has no memory bandwidth (its decode rate is a
configured delay), so emulated measurements get no roofline at all (`EMULATOR_NOTE`).

At concurrency > 1 the per-stream fraction falls by design (a step serves several streams), so
compare fractions between runs of one concurrency, not across concurrencies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglperf.errors import SglperfError
from sglperf.model.checkpoint import CheckpointFacts, gpu_weights
from sglperf.model.hardware import Bandwidth
from sglperf.model.measurement import Roofline
from sglperf.model.resolution import ModelFacts


class RooflineError(SglperfError, ValueError):
    """No roofline for this measurement: the weights read per step or the inputs cannot be counted."""


FORMULA = (
    "limit = memory bandwidth per GPU / weight bytes read per decode step per GPU x tokens per step "
    "(acceptance length with speculative decoding, else 1)"
)
LEFT_OUT = (
    "KV-cache and linear-attention state reads, activations, tensor-parallel communication and MTP/draft "
    "weights are not counted: the true limit is lower"
)
# Why an emulated measurement has no roofline. Not a figure labelled "the emulator's": its decode
# rate is whatever delay its config sets, so a share of a GPU's bandwidth limit would be a number
# that means nothing yet reads like (and gets compared with) a hardware one.
EMULATOR_NOTE = "the emulator has no memory bandwidth: its decode rate is a configured delay, not a GPU's"
# A measured rate above this share of the computed limit is impossible, not fast: everything the
# limit leaves out only lowers the true limit. The 5% slack is for what can put an honest
# measurement a little over it: vendor bandwidth figures are nominal (factory-overclocked boards run
# memory a few percent faster), decode tok/s is timed between the first and last token-carrying
# chunks (one chunk's worth of tokens at the window's edge) and is a median over a few rounds.
# Wrong inputs are off by far more: a GPU table row for another board, quantised weights counted at
# 16 bits, a wrong tensor-parallel size, a draft's acceptance length missed.
IMPOSSIBLE_ABOVE = 1.05


@dataclass(frozen=True)
class WeightBytes:
    bytes_per_gpu: int
    source: str


def embedding_bytes_per_gpu(checkpoint: CheckpointFacts, tp: int, dtype_bytes: int) -> int:
    """The input embedding table's bytes on one GPU when it is not tied to the LM head, else 0."""
    return checkpoint.untied_embedding_params * dtype_bytes // tp  # vocabulary-parallel: vocab / tp rows each


def weight_bytes_per_step(model: ModelFacts | None, config: Mapping[str, Any], tp: int) -> WeightBytes:
    """Bytes one GPU reads per decode step, from preflight's model class or else config.json."""
    if tp < 1:
        raise RooflineError(f"tp must be >= 1, got {tp}")
    checkpoint = CheckpointFacts(config)
    try:
        dtype_bytes = checkpoint.size().dtype_bytes
    except ValueError:
        dtype_bytes = 2
    embedding = embedding_bytes_per_gpu(checkpoint, tp, dtype_bytes)
    try:
        weights = gpu_weights(checkpoint, model, None, tp)
    except ValueError:
        raise RooflineError(
            "no model facts from preflight and config.json cannot be counted (see sglperf.model.checkpoint)"
        ) from None
    # The text weights leave the vision tower out already; only the embedding is subtracted here.
    dropped = ["input embedding"] if embedding else []
    if model is not None and weights.source == "model build":
        dropped = (["vision tower"] if weights.vision_bytes else []) + dropped
        return WeightBytes(
            weights.text_bytes - embedding,
            f"preflight: parameters SGLang's {model.architecture} holds on TP rank 0{_excluded(dropped)}",
        )
    return WeightBytes(weights.text_bytes - embedding, f"config.json: text weights / TP {tp}{_excluded(dropped)}")


def _excluded(parts: list[str]) -> str:
    """The weights note's tail, e.g. ", vision tower and input embedding excluded": worded in one place
    so "excluded" comes once however many parts were subtracted (it once read "excluded excluded")."""
    return f", {' and '.join(parts)} excluded" if parts else ""


def decode_roofline(
    bandwidth: Bandwidth,
    weights: WeightBytes,
    measured_tok_s: float,
    accept_length: float | None,
    gpu: str,
) -> Roofline:
    """The limit and the measured fraction of it (``accept_length`` None: no speculative decoding)."""
    if weights.bytes_per_gpu <= 0:
        raise RooflineError(f"weight bytes per GPU must be positive, got {weights.bytes_per_gpu}")
    tokens = accept_length if accept_length else 1.0
    tokens_source = (
        "measured acceptance length (median over rounds)" if accept_length else "1 (no speculative decoding)"
    )
    limit = bandwidth.gbs * 1e9 / weights.bytes_per_gpu * tokens
    fraction = measured_tok_s / limit
    problem = None
    if fraction > IMPOSSIBLE_ABOVE:
        problem = (
            f"decode {measured_tok_s:.4g} tok/s is {fraction:.0%} of the computed limit of {limit:.4g} tok/s "
            f"(over {IMPOSSIBLE_ABOVE:.0%} is impossible, not fast): the roofline inputs or the measurement are wrong. "
            f"Inputs: bandwidth {bandwidth.gbs:g} GB/s ({bandwidth.source}); weight bytes per step "
            f"{weights.bytes_per_gpu / 1e9:.3g} GB per GPU ({weights.source}); tokens per step {tokens:.3g} "
            f"({tokens_source})"
        )
    return Roofline(
        gpu=gpu,
        bandwidth_gbs=bandwidth.gbs,
        bandwidth_source=bandwidth.source,
        weight_bytes_per_gpu=weights.bytes_per_gpu,
        weight_source=weights.source,
        tokens_per_step=tokens,
        tokens_per_step_source=tokens_source,
        limit_tok_s=limit,
        measured_tok_s=measured_tok_s,
        fraction=fraction,
        problem=problem,
    )
