"""Live effective args against the preflight's prediction for the same variant: where they diverge.

(Not "drift": that word is kept for a metric's slow change across nights, `baselines.changepoint`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglperf.sglang.intents import INTENTS
from sglperf.sglang.server_api import LAUNCH_SPECIFIC_FIELDS


@dataclass(frozen=True)
class Divergence:
    """Live effective args against the preflight prediction for the same variant."""

    intent_fields: tuple[str, ...]  # differences in fields an intent reads: the prediction was wrong
    other_fields: tuple[str, ...]

    def describe(self, live: Mapping[str, Any], predicted: Mapping[str, Any]) -> list[str]:
        return [
            f"{f}: predicted {predicted.get(f)!r}, live {live.get(f)!r}"[:300]
            for f in (*self.intent_fields, *self.other_fields)
        ]


def divergence(live: Mapping[str, Any], predicted: Mapping[str, Any]) -> Divergence:
    intent_fields = {f for intent in INTENTS.values() for f in intent.fields}
    differing = sorted(
        f for f in set(live) & set(predicted) if f not in LAUNCH_SPECIFIC_FIELDS and live[f] != predicted[f]
    )
    return Divergence(
        tuple(f for f in differing if f in intent_fields), tuple(f for f in differing if f not in intent_fields)
    )
