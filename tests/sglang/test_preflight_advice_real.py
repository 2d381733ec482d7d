"""Advice that names the real cause, against SGLang 0.5.23's own resolution: a variant whose own flag
contradicts [expect] is told about its flag (not to "ask for it", nor that "SGLang overrode the
request" when it also asks), and the vision intent on a text-only model is "not applicable"."""

from __future__ import annotations

from pathlib import Path

from ..support.project import ROOT, SglangPython, one_24gb_gpu_deployment, preflight_json

DEPLOYMENT = one_24gb_gpu_deployment(
    str(ROOT / "models" / "tiny-qwen3" / "config.json"),
    """\
overlap_schedule = true

[[variants]]
id = "own-off"
flags = ["--disable-overlap-schedule"]

[[variants]]
id = "own-off-asked"
flags = ["--disable-overlap-schedule"]
request = { overlap_schedule = true }

[[variants]]
id = "vision"
request = { vision_weights_skipped = true }
""",
)


def test_advice_names_the_users_own_flag_and_an_inapplicable_intent(
    sglang_python: SglangPython, tmp_path: Path
) -> None:
    sglang_python("0.5.23")
    path = tmp_path / "advice.toml"
    path.write_text(DEPLOYMENT)
    proc, found = preflight_json(path, "0.5.23")
    records = {(r["variant"], r["intent"]): r for r in found}
    assert len(records) == 7, proc.stderr[-3000:]  # decode_cuda_graph (the shared head's) on each variant too
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
