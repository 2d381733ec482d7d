"""What a server's weight memory says about the vision tower: loaded, skipped, or too close to tell.

SGLang serves Qwen3.5/3.6 through a multimodal architecture class; whether the vision tower was
actually loaded shows only in the weight memory each GPU reports after loading. This module compares
a measurement against what each layout would take, from the model's sizes
(`sglperf.model.checkpoint.ModelSize`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sglperf.model.checkpoint import ModelSize

# Below this a loaded vision tower cannot be told apart from allocator noise.
MIN_GAP_GIB = 0.05
# Further than this from every expectation, the estimate does not describe the checkpoint.
MAX_RELATIVE_ERROR = 0.10


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
