"""Cached probe answers read back: entries from before the model's facts still parse, damaged facts do not
(the probe itself, on real releases: tests/sglang/test_probe_model.py)."""

from __future__ import annotations

import pytest

from sglperf.preflight.resolver import resolution_from_probe

from ..support.probe_answers import MODEL_FACTS, answer


def test_cache_entries_without_model_facts_still_parse_and_malformed_ones_do_not() -> None:
    old_entry = resolution_from_probe(["--x"], {}, answer(), cached=True)
    assert old_entry.model is None and old_entry.model_error is None
    failed = resolution_from_probe(["--x"], {}, answer(model_error="RuntimeError: no"), cached=True)
    assert failed.model is None and failed.model_error == "RuntimeError: no"
    built = resolution_from_probe(["--x"], {}, answer(model=MODEL_FACTS), cached=True)
    assert built.model is not None and built.model.param_bytes_per_rank == 10
    assert built.effective_args is not None and built.effective_args.model == built.model
    for damaged in (
        {**MODEL_FACTS, "moe_layers": "0"},
        {**MODEL_FACTS, "param_bytes_per_rank": True},
        "facts",
        {"seconds": 1},
    ):
        with pytest.raises((KeyError, TypeError)):
            resolution_from_probe(["--x"], {}, answer(model=damaged), cached=True)
    with pytest.raises(TypeError):
        resolution_from_probe(["--x"], {}, answer(model_error=3), cached=True)
