"""What a running server says about itself (`/server_info`, `/model_info`), as a record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Where a server reports the batch sizes it captured its decode graph for (per rank, 0.5.19+).
DECODE_GRAPH_SIZES_FIELD = "decode_cuda_graph_bs"


@dataclass(frozen=True)
class ServerFacts:
    base_url: str
    version: str
    effective: dict[str, Any]
    internal_states: tuple[dict[str, Any], ...]
    model_info: dict[str, Any]
    emulated: bool

    @classmethod
    def from_server_info(
        cls, base_url: str, info: Mapping[str, Any], model_info: dict[str, Any], not_args: frozenset[str]
    ) -> ServerFacts:
        """``info`` is `/server_info`'s JSON object; ``not_args`` its keys that are not server args."""
        states = info.get("internal_states") or []
        return cls(
            base_url=base_url,
            version=str(info.get("version", "unknown")),
            effective={k: v for k, v in info.items() if k not in not_args},
            internal_states=tuple(s for s in states if isinstance(s, dict)),
            model_info=model_info,
            emulated=bool(info.get("emulated", False)),
        )

    @property
    def avg_spec_accept_length(self) -> float | None:
        """Mean over DP ranks of the server's running acceptance average (only after speculative traffic)."""
        values = [
            float(s["avg_spec_accept_length"])
            for s in self.internal_states
            if isinstance(s.get("avg_spec_accept_length"), (int, float))
        ]
        return sum(values) / len(values) if values else None

    @property
    def graph_memory(self) -> dict[str, float] | None:
        """Per-phase CUDA graph memory (GB) of the first rank, on releases that report it (0.5.17+)."""
        for state in self.internal_states:
            graph = _memory_usage(state).get("graph")
            if isinstance(graph, Mapping):
                return {str(k): float(v) for k, v in graph.items() if isinstance(v, (int, float))}
        return None

    @property
    def weight_gib(self) -> float | None:
        for state in self.internal_states:
            weight = _memory_usage(state).get("weight")
            if isinstance(weight, (int, float)):
                return float(weight)
        return None

    @property
    def device(self) -> str:
        """``cuda`` unless the server says otherwise (``device = "cpu"``: a CPU server, not GPU results)."""
        return str(self.effective.get("device") or "cuda")

    @property
    def decode_graph(self) -> tuple[tuple[int, ...], float | None] | None:
        """(captured decode graph batch sizes, their memory in GB) of the first rank, from
        ``internal_states[..].decode_cuda_graph_bs``; None on releases that do not report it."""
        for state in self.internal_states:
            sizes = state.get(DECODE_GRAPH_SIZES_FIELD)
            if isinstance(sizes, list):
                memory = state.get("decode_cuda_graph_memory_gb")
                gb = float(memory) if isinstance(memory, (int, float)) else None
                return tuple(int(s) for s in sizes if isinstance(s, int)), gb
        return None


def _memory_usage(state: Mapping[str, Any]) -> Mapping[str, Any]:
    usage = state.get("memory_usage")
    return usage if isinstance(usage, Mapping) else {}
