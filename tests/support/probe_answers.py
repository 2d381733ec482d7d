"""Answers of the preflight probe as the cache keeps them, with and without the model's facts."""

from __future__ import annotations


def answer(**extra: object) -> dict[str, object]:
    return {"effective": {"tp_size": 2}, "logs": [], **extra}


MODEL_FACTS = {
    "architecture": "A",
    "vision_tower": None,
    "moe_layers": 0,
    "param_bytes_per_rank": 10,
    "vision_param_bytes_per_rank": 0,
    "draft_architecture": None,
    "draft_param_bytes_per_rank": 0,
    "seconds": 0.5,
}
