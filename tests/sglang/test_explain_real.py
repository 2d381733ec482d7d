"""`sglperf explain` on real SGLang releases: the seeds' hunt (which rule turned the prefill graph off on
0.5.13, what each of the operator's three flags really changed) in one command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..support.project import NEW_SGLANG, OLD_SGLANG, QWEN36, ROOT, SglangPython

SGLPERF = str(Path(sys.executable).with_name("sglperf"))


def _explain(sglang_python: SglangPython, version: str, *args: str) -> subprocess.CompletedProcess[str]:
    sglang_python(version)  # built by the fixture; the command then finds it as a user's would
    return subprocess.run(
        [SGLPERF, "explain", str(QWEN36), "--sglang-version", version, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )


def test_the_multimodal_rule_that_turned_the_prefill_graph_off_is_named_first(sglang_python: SglangPython) -> None:
    old = _explain(sglang_python, OLD_SGLANG, "--variant", "mtp3-defaults")
    assert old.returncode == 0, old.stderr
    lines = old.stdout.splitlines()
    assert lines[0] == f"qwen36 / mtp3-defaults on SGLang {OLD_SGLANG}"
    assert lines[2] == "Turned off by SGLang:"
    assert lines[3] == "  disable_piecewise_cuda_graph = True  (default False)"
    assert lines[4].startswith("      _handle_piecewise_cuda_graph (server_args.py:")
    assert lines[4].endswith('under `if self.get_model_config().is_multimodal`, "8. Multimodal / VLM models"')
    # The graph sizes, by the memory tier of the simulated 48 GB GPUs at TP 2, with SGLang's comment.
    assert "  cuda_graph_max_bs = 32  (default None)" in lines
    assert any("A100 (40GB), L40" in line and "`if self.tp_size < 4`" in line for line in lines)

    new = _explain(sglang_python, NEW_SGLANG, "--variant", "mtp3-defaults", "--json")
    assert new.returncode == 0, new.stderr
    (record,) = json.loads(new.stdout)
    fields = {d["field"]: d for d in record["decisions"]}
    assert not any("piecewise" in f for f in fields) and not any(d["turns_off"] for d in record["decisions"])
    # The declaring release's record, located where it was declared.
    max_bs = fields["cuda_graph_config.decode.max_bs"]
    assert max_bs["value"] == 32 and max_bs["rule"]["where"].startswith("memory_hook.py:")
    assert "A100 (40GB), L40" in max_bs["rule"]["comment"]


def test_against_the_defaults_each_flag_shows_what_it_changed(sglang_python: SglangPython) -> None:
    old = _explain(sglang_python, OLD_SGLANG, "--variant", "mtp3-full", "--against", "mtp3-defaults")
    assert old.returncode == 0, old.stderr
    text = old.stdout
    assert "Against mtp3-defaults:" in text and "Turned off by SGLang:" not in text
    assert "  disable_piecewise_cuda_graph: True -> False" in text
    assert "--enforce-piecewise-cuda-graph: disable_piecewise_cuda_graph True -> False" in text
    # The seeds' two flags that do nothing on this model: accepted, and nothing else moves, not even
    # the model SGLang builds (0.5.13 builds the vision tower with language_model_only).
    assert "--enable-single-batch-overlap: changes only its own field" in text
    assert '--json-model-override-args {"language_model_only": true}: changes only its own field' in text

    new = _explain(sglang_python, NEW_SGLANG, "--variant", "mtp3-full", "--against", "mtp3-defaults", "--json")
    assert new.returncode == 0, new.stderr
    (record,) = json.loads(new.stdout)
    effects = {e["flag"].split()[0]: e for e in record["comparison"]["flags"]}
    # 0.5.23 builds no vision tower for it; the prefill graph was on already, so its flag moves nothing.
    language_only = {c["field"]: c for c in effects["--json-model-override-args"]["changes"]}
    assert language_only["built_model.vision_tower"]["after"] is None
    assert [c["field"] for c in effects["--cuda-graph-backend-prefill"]["changes"]] == ["cuda_graph_backend_prefill"]
