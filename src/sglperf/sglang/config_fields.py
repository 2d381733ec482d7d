"""SGLang's effective config as flat fields, each with the concern it decides.

Releases add, rename and nest fields faster than any list of names could follow (0.5.14 moved the graph
sizes into ``cuda_graph_config.decode`` and ``.prefill``), so a field's concern is read from its name by
the words SGLang uses for that concern, and nested settings are flattened into dotted paths:
``cuda_graph_config.decode.max_bs`` compares with itself across releases and variants, and a field of
a release this table never saw still lands in a group, "other" at worst.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglperf.model.checkpoint import CheckpointFacts
from sglperf.sglang.intents import DecodeCudaGraph, PrefillCudaGraph
from sglperf.sglang.server_api import IDENTITY_FIELDS

HIERARCHICAL_CACHE_FIELD = "enable_hierarchical_cache"  # HiCache: the KV cache spilled to host memory


@dataclass(frozen=True)
class Concern:
    name: str
    words: re.Pattern[str]


# Most performance-relevant first: a diff lists its fields in this order, and a field takes the first
# concern whose words it contains (speculative_moe_runner_backend is speculative decoding's).
CONCERNS = (
    Concern("graphs", re.compile(r"cuda_graph|piecewise|torch_compile|compile_max_bs|graph_")),
    Concern("speculative decoding", re.compile(r"speculative|eagle|draft|nextn|mtp")),
    Concern(
        "overlap and scheduling",
        re.compile(
            r"overlap|schedul|chunked_prefill|max_running|prefill_decode|max_prefill|batch|mixed_chunk|priority"
        ),
    ),
    Concern("attention and kernels", re.compile(r"attention|attn|sampling|kernel|moe_runner|fp8_gemm|grammar")),
    Concern(
        "memory and KV pool",
        re.compile(r"mem_|memory|max_total_tokens|page_size|kv_cache|hicache|radix|mamba|swa_|context_length"),
    ),
    Concern(
        "parallelism and communication",
        re.compile(
            r"^(tp|dp|pp|ep|cp|dcp)_|parallel|all_?reduce|nccl|a2a|lm_head|boundary_reduction|symm|load_balance"
        ),
    ),
    Concern(
        "model loading",
        re.compile(r"built_model|load_format|quantization|dtype|weight|model_|revision|mm_|multimodal|vision"),
    ),
)
OTHER = "other"
CONCERN_NAMES = (*(c.name for c in CONCERNS), OTHER)


def concern_of(field: str) -> str:
    return next((c.name for c in CONCERNS if c.words.search(field)), OTHER)


def concern_rank(field: str) -> int:
    return CONCERN_NAMES.index(concern_of(field))


# What a backend setting holds when SGLang turns that path off (cuda_graph_config.prefill.backend, 0.5.14+).
BACKEND_OFF = PrefillCudaGraph.BACKEND_OFF


def turns_off(field: str, was: Any, value: Any) -> bool:
    """Did ``was`` -> ``value`` switch an optimisation off (``disable_*`` False -> True, ``enable_*`` True ->
    False, a ``*backend`` set to 'disabled')? An automatic value (None) resolved to off is not counted:
    nothing was on."""
    leaf = field.rsplit(".", 1)[-1]
    if leaf.startswith("disable_"):
        return was is False and value is True
    if leaf.endswith("backend"):
        return was is not None and was != BACKEND_OFF and value == BACKEND_OFF
    return leaf.startswith("enable_") and was is True and value is False


def flatten(
    effective: Mapping[str, Any], leave_out: frozenset[str] = IDENTITY_FIELDS, prefix: str = ""
) -> dict[str, Any]:
    """Fields by dotted path, nested objects opened; ``leave_out`` (by default what names the launch:
    ports, paths, the seed) and SGLang's private fields (``_raw_input``) left out."""
    flat: dict[str, Any] = {}
    for name, value in effective.items():
        if name.startswith("_") or (not prefix and name in leave_out):
            continue
        path = f"{prefix}{name}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, leave_out, f"{path}."))
        else:
            flat[path] = value
    return flat


def container_of(path: str) -> str:
    """The top-level field a dotted path lives in (``cuda_graph_config`` for ``cuda_graph_config.decode.bs``)."""
    return path.split(".", 1)[0]


# One setting under the names releases gave it, the newest first: a release pair that renamed a field
# compares its values, not an "absent" on each side.
SAME_SETTING = (
    DecodeCudaGraph.SIZES_FIELDS,
    DecodeCudaGraph.MAX_BS_FIELDS[:2],
    PrefillCudaGraph.SIZES_FIELDS,
    PrefillCudaGraph.MAX_TOKENS_FIELDS,
)


def newest_names(flat: Mapping[str, Any]) -> dict[str, str]:
    """Fields of ``flat`` under an older name of a setting whose newest name it lacks: old -> newest."""
    return {old: group[0] for group in SAME_SETTING if group[0] not in flat for old in group[1:] if old in flat}


# Settings that act only on some models or traffic: a field whose name matches acts only when the scope's
# fact holds (sglperf's workloads send text, so settings of image, video and audio inputs never act).
_SCOPED = (
    (re.compile(r"mamba"), "linear_attention"),
    (re.compile(r"hicache|hierarchical_cache"), "hierarchical_cache"),
    (re.compile(r"(^|[._])swa_"), "sliding_window"),
    (re.compile(r"(^|[._])(mm|image|video|audio)_|multimodal"), "multimodal_inputs"),
)


@dataclass(frozen=True)
class ModelScope:
    """What of SGLang's settings can act on one deployment: its model's layers and the cache it runs."""

    linear_attention: bool
    sliding_window: bool
    hierarchical_cache: bool
    multimodal_inputs: bool = False

    @classmethod
    def of(cls, hf_config: Mapping[str, Any], *effective: Mapping[str, Any]) -> ModelScope:
        facts = CheckpointFacts(hf_config)
        hierarchical = any(bool(e.get(HIERARCHICAL_CACHE_FIELD)) for e in effective)
        return cls(facts.linear_attention, facts.sliding_window, hierarchical)

    def applies(self, path: str) -> bool:
        """Whether the setting ``path`` can change anything here (what the model class builds always can)."""
        if path.startswith("built_model."):
            return True
        return all(getattr(self, fact) for pattern, fact in _SCOPED if pattern.search(path))
