"""Baseline files and their parts, as a 2xA6000 runner records them for qwen36/mtp1."""

from __future__ import annotations

from pathlib import Path

from sglperf.baselines import store
from sglperf.model.measurement import Provenance


def provenance(**changes: object) -> Provenance:
    """The provenance of a run on two A6000s with SGLang 0.5.23, with ``changes`` applied."""
    base: dict[str, object] = {
        "sglang_version": "0.5.23",
        "runner": "2xA6000",
        "date": "2026-11-29T00:00:00+00:00",
        "effective_args_digest": "abc",
        "launch_command": "python -m sglang.launch_server",
        "gpu_count": 2,
        "gpu_names": ("NVIDIA RTX A6000", "NVIDIA RTX A6000"),
    }
    return Provenance.model_validate({**base, **changes})


def entry(workload: str = "decode-chat", concurrency: int = 1, scale: float = 1.0) -> store.Entry:
    """Twelve rounds of decode tok/s (about 70, times ``scale``) and TTFT."""
    samples = {
        "decode_tok_s": [70.0 * scale + i * 0.1 for i in range(12)],
        "ttft_s": [0.2 + i * 0.001 for i in range(12)],
    }
    return store.make_entry(workload, concurrency, "digest", 256, samples)


def baseline_file(path: Path) -> Path:
    """A baseline of decode-chat at concurrency 1 and 2."""
    store.record(path, "qwen36", "mtp1", provenance(), entry(concurrency=1))
    store.record(path, "qwen36", "mtp1", provenance(), entry(concurrency=2))
    return path
