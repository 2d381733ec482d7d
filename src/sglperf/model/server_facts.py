"""What a running server says about itself (`/server_info`, `/model_info`), as a record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServerFacts:
    base_url: str
    version: str
    effective: dict[str, Any]
    internal_states: tuple[dict[str, Any], ...]
    model_info: dict[str, Any]
    emulated: bool

    @property
    def graph_memory(self) -> dict[str, float] | None:
        """Per-phase CUDA graph memory (GB) of the first rank, on releases that report it (0.5.17+)."""
        for state in self.internal_states:
            graph = (state.get("memory_usage") or {}).get("graph")
            if isinstance(graph, Mapping):
                return {str(k): float(v) for k, v in graph.items() if isinstance(v, (int, float))}
        return None

    @property
    def weight_gib(self) -> float | None:
        for state in self.internal_states:
            weight = (state.get("memory_usage") or {}).get("weight")
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
            sizes = state.get("decode_cuda_graph_bs")
            if isinstance(sizes, list):
                memory = state.get("decode_cuda_graph_memory_gb")
                gb = float(memory) if isinstance(memory, (int, float)) else None
                return tuple(int(s) for s in sizes if isinstance(s, int)), gb
        return None
