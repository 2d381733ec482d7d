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
