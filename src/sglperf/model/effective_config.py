"""One variant's whole effective config, as one tier saw it, for the results folder.

Verdicts name the few fields their intent reads; a regression whose cause is another field (the KV pool,
an attention backend, a graph's sizes) needs the rest. Each run that checks a variant writes it once per
tier: SGLang's own resolution (preflight) or what the running server reported (live). Fields are
flattened ("cuda_graph_config.prefill.backend"), launch-specific ones (ports, paths, seeds, memory-sized
pools) left out; the digest is the baselines' key, so a record and a baseline are matched by it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_NAMES = ("tier", "deployment", "variant", "sglang_version", "digest")


@dataclass(frozen=True)
class EffectiveConfigRecord:
    tier: str  # the tier of the verdicts it sits beside: "preflight", "live", ...
    deployment: str
    variant: str
    sglang_version: str
    digest: str
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.tier, self.deployment, self.variant, self.sglang_version)

    def to_record(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "deployment": self.deployment,
            "variant": self.variant,
            "sglang_version": self.sglang_version,
            "digest": self.digest,
            "fields": self.fields,
        }

    @classmethod
    def from_record(cls, raw: dict[str, Any]) -> EffectiveConfigRecord:
        """KeyError/TypeError/ValueError when ``raw`` is not one."""
        fields = raw["fields"]
        if not isinstance(fields, dict):
            raise TypeError(f"fields is {type(fields).__name__}, not an object")
        tier, deployment, variant, version, digest = (raw[k] for k in _NAMES)
        if not all(isinstance(t, str) for t in (tier, deployment, variant, version, digest)):
            raise TypeError(f"{', '.join(_NAMES)} are strings")
        return cls(tier, deployment, variant, version, digest, fields)
