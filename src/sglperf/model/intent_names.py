"""The names of the intents: the vocabulary deployment files and test ids use.

How each release spells and reads an intent lives in `sglperf.sglang.intents`; the names live here so
that a deployment file can be validated without knowing any SGLang release.
"""

PREFILL_CUDA_GRAPH = "prefill_cuda_graph"
DECODE_CUDA_GRAPH = "decode_cuda_graph"
OVERLAP_SCHEDULE = "overlap_schedule"
SINGLE_BATCH_OVERLAP = "single_batch_overlap"
VISION_WEIGHTS_SKIPPED = "vision_weights_skipped"
SPECULATIVE = "speculative"

INTENT_NAMES = (
    PREFILL_CUDA_GRAPH,
    DECODE_CUDA_GRAPH,
    OVERLAP_SCHEDULE,
    SINGLE_BATCH_OVERLAP,
    VISION_WEIGHTS_SKIPPED,
    SPECULATIVE,
)
