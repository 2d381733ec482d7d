"""Preflight against real SGLang releases, resolved now by their own code (nothing recorded).

0.5.13 stands for the 0.5.10-0.5.13 family (piecewise booleans, multimodal auto-disable without a
log line); 0.5.23 for the backend-config family with the Qwen3.5 multimodal exemption.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sglperf import preflight
from sglperf.model.deployment_file import load
from sglperf.model.verdict import Status, Verdict

from ..support.project import NEW_SGLANG, OLD_SGLANG, QWEN36, ROOT, SglangPython


def _verdicts(deployment_path: Path, python: str, cache_dir: Path) -> dict[tuple[str, str], Verdict]:
    d = load(deployment_path)
    resolver = preflight.Resolver(python, d.runner, cache_dir=cache_dir)
    try:
        return {(c.variant.id, v.intent): v for c in preflight.check(d, resolver) for v in c.verdicts}
    finally:
        resolver.close()


def test_old_family_disables_prefill_graph_for_multimodal_unless_asked(
    sglang_python: SglangPython, tmp_path: Path
) -> None:
    verdicts = _verdicts(QWEN36, sglang_python(OLD_SGLANG), tmp_path)
    defaults = verdicts[("mtp3-defaults", "prefill_cuda_graph")]
    assert defaults.status == Status.FAIL and defaults.actual == "off"
    assert defaults.sglang_version == OLD_SGLANG
    # The rule that did it, named from SGLang's own source of that release.
    assert any("_handle_piecewise_cuda_graph" in r and "Multimodal" in r for r in defaults.reasons), defaults.reasons
    assert "--enforce-piecewise-cuda-graph" in defaults.detail  # how to ask for it on this release
    asked = verdicts[("mtp3-prefill-graph", "prefill_cuda_graph")]
    assert asked.status == Status.PASS, asked.message()
    assert verdicts[("mtp3-prefill-graph", "speculative")].status == Status.PASS
    # --language-only (no --language-model-only before 0.5.18): the model class as built still has its tower.
    vision = verdicts[("mtp3-full", "vision_weights_skipped")]
    assert vision.status == Status.INERT and "still builds its vision tower" in vision.detail, vision.message()


def test_new_family_keeps_prefill_graph_for_qwen35(sglang_python: SglangPython, tmp_path: Path) -> None:
    verdicts = _verdicts(QWEN36, sglang_python(NEW_SGLANG), tmp_path)
    for variant in ("mtp3-defaults", "mtp3-prefill-graph"):
        v = verdicts[(variant, "prefill_cuda_graph")]
        assert v.status == Status.PASS and v.sglang_version == NEW_SGLANG, v.message()
        assert "cuda_graph_config.prefill.backend = 'breakable'" in v.detail
    assert verdicts[("mtp1", "speculative")].actual == "EAGLE steps=1 draft=2 topk=1"
    # Set, but the model class as built has no MoE layers: single-batch overlap does nothing here.
    overlap = verdicts[("mtp3-full", "single_batch_overlap")]
    assert overlap.status == Status.INERT and "0 modules with routed experts" in overlap.detail, overlap.message()
    # --language-model-only: the model class as built has no vision tower.
    vision = verdicts[("mtp3-full", "vision_weights_skipped")]
    assert vision.status == Status.PASS and "vision tower none" in vision.detail, vision.message()


def test_removed_flag_is_an_error_naming_flag_version_and_replacement(
    sglang_python: SglangPython, deployment_dir: Path
) -> None:
    text = QWEN36.read_text().replace(
        'id = "mtp3-defaults"', 'id = "mtp3-defaults"\nflags = ["--enable-piecewise-cuda-graph"]'
    )
    path = deployment_dir / "deployments" / "qwen36.toml"
    path.write_text(text)
    verdicts = _verdicts(path, sglang_python(NEW_SGLANG), deployment_dir / "cache")
    v = verdicts[("mtp3-defaults", "prefill_cuda_graph")]
    assert v.status == Status.ERROR
    assert "--enable-piecewise-cuda-graph is not accepted by SGLang 0.5.23" in v.detail
    assert "replacement: --cuda-graph-backend-prefill breakable" in v.detail
    assert verdicts[("mtp1", "prefill_cuda_graph")].status == Status.PASS  # other variants unaffected


def test_sglang_validation_error_carries_sglangs_message(sglang_python: SglangPython, deployment_dir: Path) -> None:
    # Without the mamba/spec-v2 rule, 0.5.13 refuses MTP on this hybrid model.
    start = QWEN36.read_text().index("[[launch.when]]")
    end = QWEN36.read_text().index("# Checked on every variant.")
    path = deployment_dir / "deployments" / "qwen36.toml"
    path.write_text(QWEN36.read_text()[:start] + QWEN36.read_text()[end:])
    verdicts = _verdicts(path, sglang_python(OLD_SGLANG), deployment_dir / "cache")
    v = verdicts[("mtp1", "speculative")]
    assert v.status == Status.ERROR
    assert "SGLang's validation says: ValueError" in v.detail
    assert "--mamba-scheduler-strategy extra_buffer" in v.detail  # SGLang's own words


def test_second_run_is_served_from_cache_without_starting_sglang(sglang_python: SglangPython, tmp_path: Path) -> None:
    d = load(QWEN36)
    python = sglang_python(NEW_SGLANG)
    first = preflight.Resolver(python, d.runner, cache_dir=tmp_path)
    cold = preflight.check(d, first)
    first.close()
    second = preflight.Resolver(python, d.runner, cache_dir=tmp_path)
    warm = preflight.check(d, second)
    assert second._worker is None  # SGLang never imported the second time
    assert all(c.resolution and c.resolution.cached for c in warm)
    assert [v.to_record() for c in cold for v in c.verdicts] == [v.to_record() for c in warm for v in c.verdicts]
    # A different runner profile is a different question.
    other = preflight.Resolver(python, d.runner.model_copy(update={"gpu_name": "NVIDIA H100"}), cache_dir=tmp_path)
    assert other._cached_resolution("x", [], {}) is None and other._key_base != second._key_base


# Where each release's own source turns the overlap scheduler off for pipeline parallelism.
PIPELINE_OVERLAP_RULES = {
    OLD_SGLANG: "_handle_pipeline_parallelism",  # 0.5.13: ServerArgs.__post_init__ (server_args.py)
    "0.5.19": "_pipeline_parallel_overlap_disable",  # 0.5.19+: a registered post-process (arg_groups/overrides.py)
    NEW_SGLANG: "_pipeline_parallel_overlap_disable",
}


@pytest.mark.parametrize("version", sorted(PIPELINE_OVERLAP_RULES))
def test_overlap_schedule_is_on_for_qwen36_and_off_with_the_rule_that_turned_it_off(
    version: str, sglang_python: SglangPython, deployment_dir: Path
) -> None:
    """Every shipped qwen36 variant keeps the overlap scheduler; one with two pipeline stages loses it,
    and the verdict names the release's own rule ("Pipeline parallelism is incompatible with overlap")."""
    text = QWEN36.read_text().replace("tp_size = 2", "tp_size = 1")
    text = text.replace('id = "mtp1"', 'id = "mtp1"\nflags = ["--pp-size", "2"]')
    path = deployment_dir / "deployments" / "qwen36.toml"
    path.write_text(text)
    verdicts = _verdicts(path, sglang_python(version), deployment_dir / "cache")
    for variant in ("mtp3-defaults", "mtp3-prefill-graph", "mtp3-full"):
        kept = verdicts[(variant, "overlap_schedule")]
        assert kept.status == Status.PASS and kept.actual == "on", kept.message()
    lost = verdicts[("mtp1", "overlap_schedule")]
    assert lost.status == Status.FAIL and lost.actual == "off" and lost.sglang_version == version, lost.message()
    assert "disable_overlap_schedule = True" in lost.detail, lost.message()
    rule = PIPELINE_OVERLAP_RULES[version]
    assert any(rule in r for r in lost.reasons), lost.reasons


MOE_DEPLOYMENT = """
description = "Qwen3-30B-A3B (MoE), single-batch overlap requested"
[model]
key = "qwen3-30b-a3b"
served_path = "/models/Qwen3-30B-A3B"
config = "../models/qwen3-30b-a3b/config.json"
[runner]
name = "{name}"
gpu_count = 1
gpu_name = "{gpu}"
compute_capability = "{cc}"
memory_gib = 80
sm_count = {sms}
[launch]
tp_size = 1
[[variants]]
id = "sbo"
request = {{ single_batch_overlap = true }}
[[variants]]
id = "plain"
"""
MOE_CONFIG = ROOT / "models" / "qwen3-30b-a3b" / "config.json"


# 32-43 s a release in a CI run (a MoE model built on the meta device): .ci/run keeps the newest, the older two are
# ci/selftest-long.sh's.
@pytest.mark.parametrize(
    "version",
    [pytest.param(OLD_SGLANG, marks=pytest.mark.long), pytest.param("0.5.19", marks=pytest.mark.long), NEW_SGLANG],
)
def test_a_start_up_that_sglang_refuses_on_the_runners_gpu_is_an_error_with_its_message(
    version: str, sglang_python: SglangPython, deployment_dir: Path
) -> None:
    """SGLang's scheduler seeds its MoE settings at start-up and refuses single-batch overlap on SM90
    (initialize_moe_config): resolution alone passes it. On a simulated H100 every intent of that
    variant is an ERROR quoting SGLang; the same variant on an A100, and the H100 without the request,
    are not refused."""
    (deployment_dir / "models" / "qwen3-30b-a3b").mkdir(parents=True)
    (deployment_dir / "models" / "qwen3-30b-a3b" / "config.json").write_text(MOE_CONFIG.read_text())
    python = sglang_python(version)
    found = {}
    for name, gpu, cc, sms in (
        ("1xH100", "NVIDIA H100 80GB HBM3", "9.0", 132),
        ("1xA100", "NVIDIA A100-SXM4-80GB", "8.0", 108),
    ):
        path = deployment_dir / "deployments" / f"moe-{name}.toml"
        path.write_text(MOE_DEPLOYMENT.format(name=name, gpu=gpu, cc=cc, sms=sms))
        found[name] = _verdicts(path, python, deployment_dir / "cache")
    refused = found["1xH100"][("sbo", "single_batch_overlap")]
    assert refused.status == Status.ERROR and refused.sglang_version == version, refused.message()
    assert refused.detail.startswith(
        "SGLang would refuse to start it on this runner's GPUs: ValueError: SBO (single batch overlap) is not "
        "supported on SM90 GPUs"
    )
    assert "(the scheduler's start-up: initialize_moe_config, layers/moe/utils.py:" in refused.detail
    assert {v.status for (variant, _), v in found["1xH100"].items() if variant == "sbo"} == {Status.ERROR}
    assert Status.ERROR not in {v.status for (variant, _), v in found["1xH100"].items() if variant == "plain"}
    allowed = found["1xA100"][("sbo", "single_batch_overlap")]
    assert allowed.status == Status.PASS, allowed.message()
