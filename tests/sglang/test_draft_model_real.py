"""A draft model declared in [launch.speculative] resolves in SGLang 0.5.23's own preflight from its
config.json here (the runner path would be tried as a Hugging Face repo id and refused)."""

from __future__ import annotations

from pathlib import Path

from ..support.project import SglangPython, preflight_json
from ..unit.test_draft_model import DRAFT, HEAD


def test_a_declared_draft_model_resolves_from_its_config(sglang_python: SglangPython, tmp_path: Path) -> None:
    sglang_python("0.5.23")
    path = tmp_path / "draft.toml"
    draft = f'draft_model = {{ served_path = "/models/EAGLE3-tiny", config = "{DRAFT}" }}\n'
    path.write_text(HEAD + draft + '\n[[variants]]\nid = "eagle3"\n')
    proc, records = preflight_json(path, "0.5.23")
    assert len(records) == 1, proc.stderr[-2000:]
    record = records[0]
    assert record["status"] == "pass" and record["actual"] == "EAGLE3 steps=2 draft=3 topk=1", record
