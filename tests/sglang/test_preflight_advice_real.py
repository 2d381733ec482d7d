"""Advice that names the real cause, against SGLang 0.5.23's own resolution: a variant whose own flag
contradicts [expect] is told about its flag (not to "ask for it", nor that "SGLang overrode the
request" when it also asks), and the vision intent on a text-only model is "not applicable"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ..support.project import ROOT, SglangPython

SGLPERF = str(Path(sys.executable).with_name("sglperf"))
DEPLOYMENT = f"""\
[model]
key = "tiny-qwen3"
served_path = "/models/tiny-qwen3"
config = "{ROOT / "models" / "tiny-qwen3" / "config.json"}"

[runner]
name = "1x4090"
gpu_count = 1
gpu_name = "NVIDIA GeForce RTX 4090"
compute_capability = "8.9"
memory_gib = 24
sm_count = 128

[launch]
tp_size = 1

[expect]
overlap_schedule = true

[[variants]]
id = "own-off"
flags = ["--disable-overlap-schedule"]

[[variants]]
id = "own-off-asked"
flags = ["--disable-overlap-schedule"]
request = {{ overlap_schedule = true }}

[[variants]]
id = "vision"
request = {{ vision_weights_skipped = true }}
"""


def test_advice_names_the_users_own_flag_and_an_inapplicable_intent(
    sglang_python: SglangPython, tmp_path: Path
) -> None:
    sglang_python("0.5.23")
    path = tmp_path / "advice.toml"
    path.write_text(DEPLOYMENT)
    proc = subprocess.run(
        [SGLPERF, "preflight", str(path), "--sglang", "0.5.23", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    records = {(r["variant"], r["intent"]): r for r in json.loads(proc.stdout or "[]")}
    assert len(records) == 4, proc.stderr[-3000:]
    for variant in ("own-off", "own-off-asked"):
        own = records[(variant, "overlap_schedule")]
        assert own["status"] == "fail" and own["actual"] == "off", own
        assert own["detail"] == (
            "read from disable_overlap_schedule = True; --disable-overlap-schedule in the variant's own flags turns "
            "it off: remove it there, or put expect = { overlap_schedule = false } in this variant"
        ), own
    vision = records[("vision", "vision_weights_skipped")]
    assert vision["status"] == "inert" and vision["actual"] == "not applicable", vision
    assert vision["detail"].startswith("not applicable: Qwen3ForCausalLM is text-only"), vision
    assert not any("overrode" in r["detail"] for r in records.values())
