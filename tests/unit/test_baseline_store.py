"""The baseline store: deterministic files, atomic writes, clear errors (records from several processes
at once: tests/integration/test_baseline_store_concurrency.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sglperf.baselines import store

from ..support.baselines import provenance


def _entry(workload: str = "decode-chat", scale: float = 1.0) -> store.Entry:
    return store.make_entry(
        workload, 1, "digest", 256, {"decode_tok_s": [70.123456789 * scale + i * 0.1 for i in range(12)]}
    )


def test_files_are_deterministic_and_rounded(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    _, new = store.record(path, "qwen36", "mtp1", provenance(), _entry())
    text = path.read_text()
    assert text == store.dumps(new) and text == store.dumps(store.load(path))
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert data["entries"]["decode-chat@c1"]["samples"]["decode_tok_s"][0] == 70.1235  # 6 significant digits


def test_a_failed_write_leaves_the_old_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "b.json"
    store.record(path, "qwen36", "mtp1", provenance(), _entry())
    before = path.read_text()

    def crash(*_a: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(store.BaselineError, match=r"b.json: cannot be written \(disk full\); nothing was changed"):
        store.record(path, "qwen36", "mtp1", provenance(), _entry(scale=2))
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"schema_version": 99}', "schema_version 99 is not one this sglperf reads"),
        ('{"schema_version": 1, "deployment": "x"}', "invalid baseline file"),
    ],
)
def test_unreadable_files_get_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(store.BaselineError, match=message) as excinfo:
        store.load(path)
    assert str(path) in str(excinfo.value)


def test_identity_and_context() -> None:
    stored = store.Baseline(
        schema_version=1,
        deployment="qwen36",
        variant="mtp1",
        provenance=provenance(),
        entries={"decode-chat@c1": _entry()},
    )
    assert store.identity_problems(stored, provenance()) == []
    problems = store.identity_problems(stored, provenance(gpu_count=4, emulated=True, runner="4xA6000"))
    assert len(problems) == 3
    notes = store.context_notes(
        stored,
        stored.entries["decode-chat@c1"],
        provenance(sglang_version="0.5.24", effective_args_digest="def"),
        "other",
    )
    assert notes == [
        "SGLang 0.5.23 -> 0.5.24",
        "effective server args changed since the baseline",
        "prompt set changed since the baseline",
    ]
    # With the fields kept, the note names them, most performance-relevant first, and counts the rest.
    fields = {"chunked_prefill_size": 4096, "disable_overlap_schedule": False, "cuda_graph_config.decode.max_bs": 32}
    kept = stored.model_copy(update={"provenance": provenance(effective_args=fields)})
    now = {
        **fields,
        "chunked_prefill_size": 8192,
        "cuda_graph_config.decode.max_bs": 48,
        "grammar_backend": "x",
        "a": 1,
    }
    (note,) = store.context_notes(
        kept,
        entry := kept.entries["decode-chat@c1"],
        provenance(effective_args_digest="def", effective_args=now),
        entry.prompt_digest,
    )
    assert note == (
        "effective server args changed since the baseline: cuda_graph_config.decode.max_bs 32 -> 48, "
        "chunked_prefill_size 4096 -> 8192, grammar_backend (absent) -> 'x' (+1 more)"
    )
    # The KV pool: noted beyond 5%, not for the few hundred tokens two starts differ by.
    pooled = stored.model_copy(update={"provenance": provenance(kv_pool_tokens=1_045_353)})
    entry = stored.entries["decode-chat@c1"]
    assert store.context_notes(pooled, entry, provenance(kv_pool_tokens=1_044_914), entry.prompt_digest) == []
    assert store.context_notes(pooled, entry, provenance(kv_pool_tokens=None), entry.prompt_digest) == []
    assert store.context_notes(pooled, entry, provenance(kv_pool_tokens=812_000), entry.prompt_digest) == [
        "KV cache pool 1,045,353 -> 812,000 tokens (-22%)"
    ]
    # --enable-metrics on since a baseline that had it off (or predates the field), and GPU limits changed.
    for then in (None, False):
        old = stored.model_copy(update={"provenance": provenance(server_metrics=then)})
        (note,) = store.context_notes(old, entry, provenance(server_metrics=True), entry.prompt_digest)
        assert note.startswith("SGLang's --enable-metrics is on now and was off for the baseline")
    metered = stored.model_copy(update={"provenance": provenance(server_metrics=True)})
    assert store.context_notes(metered, entry, provenance(server_metrics=True), entry.prompt_digest) == []
    limited = stored.model_copy(update={"provenance": provenance(gpu_power_limit_w=300.0, gpu_sm_clock_max_mhz=2100.0)})
    assert store.context_notes(
        limited, entry, provenance(gpu_power_limit_w=250.0, gpu_sm_clock_max_mhz=2100.0), entry.prompt_digest
    ) == ["GPU power limit 300 -> 250 W since the baseline"]
    lines = store.describe_change(stored, stored, "decode-chat@c1")
    assert any("decode_tok_s: median" in line and "(+0.0%)" in line for line in lines)


def test_dummy_weights_skip_acceptance_and_say_so(tmp_path: Path) -> None:
    from sglperf.baselines import regression
    from sglperf.runtime.provenance import uses_dummy_weights

    assert uses_dummy_weights(["--model-path", "/m", "--load-format", "dummy"])
    assert uses_dummy_weights(["--load-format=dummy"])
    assert not uses_dummy_weights(["--load-format", "safetensors"])
    path = tmp_path / "b.json"
    samples = {
        "decode_tok_s": [70.0 + i * 0.1 for i in range(12)],
        "accept_length": [2.5 + i * 0.01 for i in range(12)],
    }
    store.record(path, "qwen36", "mtp1", provenance(dummy_weights=True), store.make_entry("w", 1, "d", 256, samples))
    worse = {"decode_tok_s": samples["decode_tok_s"], "accept_length": [a * 0.5 for a in samples["accept_length"]]}
    outcome = regression.compare_to_baseline(
        path,
        provenance(),
        store.make_entry("w", 1, "d", 256, worse),
        {},
        missing="fail",
        mismatch="fail",
        record_command="x",
    )
    assert [c.metric for c in outcome.comparisons] == ["decode_tok_s"]  # acceptance not compared
    assert outcome.problems == [] and "dummy weights" in outcome.notes[0]


def test_cli_show_and_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sglperf.cli import main

    old, new = tmp_path / "old.json", tmp_path / "new.json"
    store.record(old, "qwen36", "mtp1", provenance(), _entry())
    store.record(new, "qwen36", "mtp1", provenance(sglang_version="0.5.24"), _entry(scale=0.9))
    assert main(["baseline", "show", str(old)]) == 0
    out = capsys.readouterr().out
    assert "qwen36/mtp1 on 2xA6000 (2x NVIDIA RTX A6000)" in out and "decode-chat@c1: decode_tok_s" in out
    assert main(["baseline", "diff", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert (
        "qwen36/mtp1 decode-chat@c1 decode_tok_s: median" in out and "(-9.9%)" in out
    )  # only the 70.1 part of each sample is scaled by 0.9
    assert "SGLang 0.5.23 -> 0.5.24" in out and "decode_tok_s regressed" in out
    assert main(["baseline", "show", str(tmp_path / "missing.json")]) == 2
