"""Each variant's whole effective config in the results folder: written flattened under the baselines'
digest, read back per run, and a damaged line named in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglperf.model.effective_config import EffectiveConfigRecord
from sglperf.model.verdict import Status, Verdict
from sglperf.results.folder import RUN_ID_FIELD, ResultsError, RunStamp, collect
from sglperf.runtime.provenance import effective_config_record, effective_digest

EFFECTIVE = {
    "port": 30000,
    "model_path": "/models/x",
    "chunked_prefill_size": 4096,
    "cuda_graph_config": {"prefill": {"backend": "breakable", "max_bs": 4096}},
}


def test_the_record_is_flat_keyed_by_the_digest_and_leaves_the_launch_out() -> None:
    record = effective_config_record("preflight", "qwen36", "mtp1", "0.5.23", EFFECTIVE)
    assert record.fields == {
        "chunked_prefill_size": 4096,
        "cuda_graph_config.prefill.backend": "breakable",
        "cuda_graph_config.prefill.max_bs": 4096,
    }
    assert record.digest == effective_digest({**EFFECTIVE, "port": 31000})  # another launch, the same key
    assert EffectiveConfigRecord.from_record(json.loads(json.dumps(record.to_record()))) == record


def _folder(tmp_path: Path, *config_lines: str) -> Path:
    stamp = RunStamp.new("night")
    stamp.write(tmp_path)
    verdict = Verdict("qwen36", "mtp1", "overlap_schedule", "on", "on", Status.PASS, "", "0.5.23")
    (tmp_path / "verdicts-main.jsonl").write_text(json.dumps({**verdict.to_record(), RUN_ID_FIELD: "night"}) + "\n")
    (tmp_path / "configs-main.jsonl").write_text("".join(line + "\n" for line in config_lines))
    return tmp_path


def test_a_run_reads_back_its_own_configs(tmp_path: Path) -> None:
    mine = effective_config_record("preflight", "qwen36", "mtp1", "0.5.23", EFFECTIVE).to_record()
    older = {**mine, "sglang_version": "0.5.22"}
    folder = _folder(tmp_path, json.dumps({**mine, RUN_ID_FIELD: "night"}), json.dumps({**older, RUN_ID_FIELD: "old"}))
    assert [c.sglang_version for c in collect(folder).configs] == ["0.5.23"]


@pytest.mark.parametrize(
    "line",
    [
        "{not json",
        json.dumps({"tier": "live"}),
        json.dumps({**dict.fromkeys(("tier", "deployment", "variant", "sglang_version", "digest"), "x"), "fields": []}),
    ],
)
def test_a_damaged_config_line_is_named_in_one_line(tmp_path: Path, line: str) -> None:
    with pytest.raises(ResultsError) as raised:
        collect(_folder(tmp_path, line))
    assert str(raised.value).startswith(f"{tmp_path / 'configs-main.jsonl'}:1: not an effective-config record (")
    assert "\n" not in str(raised.value)
