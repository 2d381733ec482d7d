"""The emulator's weight memory, and so its KV pool, for any model preflight can build: from the release's own
model build (preflight's `ModelFacts`), config.json counting only where no build is at hand (said), and one
line naming the --emulator-config key where neither can size the model (never "a bug in sglperf")."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sglperf import preflight
from sglperf.model.checkpoint import CheckpointFacts, GpuWeights, gpu_weights
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import load
from sglperf.model.files import GIB
from sglperf.model.resolution import Resolution
from sglperf.runtime.server import ServerStartError
from sglperf.scaffold import InitRequest, init
from sglperf.session.live_session import (
    EMULATOR_DRIFT_EPOCH_KEY,
    EMULATOR_DRIFT_KEY,
    EMULATOR_GPU_MEMORY_KEY,
    EMULATOR_VISION_KEY,
    EMULATOR_WEIGHT_KEY,
    LiveSession,
)
from sglperf.session.preflight_session import PreflightSession
from sglperf.session.running import LiveOptions
from sglperf.testing.emulator import EmulatorConfig
from sglperf.testing.emulator.config import parse_launch_args
from sglperf.testing.emulator.state import EmulatorState

from ..support.project import QWEN36_CONFIG, ROOT
from .test_scaffold import GEMMA, GEMMA_BUILD, L40S, no_gpus

pytestmark = pytest.mark.selftest


@pytest.fixture(scope="module")
def gemma(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    repo = tmp_path_factory.mktemp("repo")
    return load(init(InitRequest(model=GEMMA, root=repo, served_path="/m", **L40S), inventory=no_gpus).deployment)  # type: ignore[arg-type]


def _check(deployment: Deployment, variant: str, **resolution: Any) -> preflight.VariantCheck:
    found = Resolution(argv=(), env={}, effective={"tp_size": 1, "mem_fraction_static": 0.88}, **resolution)
    return preflight.VariantCheck(deployment, deployment.variant(variant), None, found)


def _emulator_config(
    tmp_path: Path, deployment: Deployment, check: preflight.VariantCheck, user: dict[str, Any] | None = None
) -> tuple[dict[str, Any], list[str]]:
    said: list[str] = []
    options = LiveOptions(emulator=True, results_dir=tmp_path, emulator_config=json.dumps(user) if user else None)
    session = LiveSession(options, PreflightSession(lambda: sys.executable), said.append)
    env = session._emulator_env("gemma-defaults", check, "0.5.23", deployment, deployment.hf_config())
    return json.loads(env["SGLPERF_EMULATOR_CONFIG"]), said


def test_the_session_sets_only_keys_the_emulator_has() -> None:
    fields = {f.name for f in dataclasses.fields(EmulatorConfig)}
    ours = {EMULATOR_WEIGHT_KEY, EMULATOR_VISION_KEY, EMULATOR_GPU_MEMORY_KEY}
    assert ours | {EMULATOR_DRIFT_KEY, EMULATOR_DRIFT_EPOCH_KEY} <= fields


def test_gemma_is_served_with_the_weights_the_release_builds(tmp_path: Path, gemma: Deployment) -> None:
    """The issue's case: every emulator measurement of Gemma-3 died on `model_type 'gemma3' is not supported`."""
    config, said = _emulator_config(tmp_path, gemma, _check(gemma, "defaults", model=GEMMA_BUILD))
    text = (GEMMA_BUILD.param_bytes_per_rank - GEMMA_BUILD.vision_param_bytes_per_rank) / GIB
    assert config[EMULATOR_WEIGHT_KEY] == pytest.approx(text, abs=1e-3)  # 21.92 GiB
    assert config[EMULATOR_VISION_KEY] == pytest.approx(GEMMA_BUILD.vision_param_bytes_per_rank / GIB, abs=1e-3)
    assert config[EMULATOR_GPU_MEMORY_KEY] == 48  # the runner's L40S
    assert said == []  # the build is the source a server has: nothing to say
    # The KV pool is what the runner's GPU leaves after the weights and graphs.
    effective = {"mem_fraction_static": 0.88}
    state = EmulatorState(EmulatorConfig.from_mapping(config), parse_launch_args([]), effective, "0.5.23", "preflight")
    memory = state.memory_usage()
    assert memory["weight"] == pytest.approx(GEMMA_BUILD.param_bytes_per_rank / GIB, abs=0.01)
    graphs = sum(memory["graph"].values())
    assert memory["kvcache"] == pytest.approx(48 * 0.88 - memory["weight"] - graphs, abs=0.02)


def test_a_variant_whose_build_has_no_tower_loads_none(tmp_path: Path, gemma: Deployment) -> None:
    lm_only = dataclasses.replace(
        GEMMA_BUILD, vision_tower=None, param_bytes_per_rank=23_540_918_016, vision_param_bytes_per_rank=0
    )
    config, _ = _emulator_config(tmp_path, gemma, _check(gemma, "text-only", model=lm_only))
    assert config[EMULATOR_VISION_KEY] == 0 and config[EMULATOR_WEIGHT_KEY] == pytest.approx(21.924, abs=1e-3)


def test_without_a_build_config_json_counts_and_the_run_says_so(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    llama = ROOT / "tests" / "data" / "hf-configs" / "Llama-3.1-8B-Instruct"
    deployment = load(init(InitRequest(model=llama, root=repo, served_path="/m", **L40S), inventory=no_gpus).deployment)  # type: ignore[arg-type]
    check = _check(deployment, "defaults", model_error="RuntimeError: parallel name 'tp_rank' has not been written")
    config, said = _emulator_config(tmp_path, deployment, check)
    assert config[EMULATOR_WEIGHT_KEY] == pytest.approx(14.96, abs=0.01) and config[EMULATOR_VISION_KEY] == 0
    (line,) = said
    assert line.startswith("gemma-defaults: emulator weights 14.96 GiB per GPU, counted from config.json")
    assert "SGLang's model build failed: RuntimeError: parallel name 'tp_rank' has not been written" in line


def test_neither_a_build_nor_config_json_is_one_line_naming_the_setting(tmp_path: Path, gemma: Deployment) -> None:
    check = _check(gemma, "defaults", model_error="ValueError: no such model class")
    with pytest.raises(ServerStartError) as raised:
        _emulator_config(tmp_path, gemma, check)
    message = str(raised.value)
    assert len(message.splitlines()) == 1 and "bug" not in message
    assert "model_type 'gemma3' is not supported" in message and "no such model class" in message
    assert message.endswith("""--emulator-config '{"weight_gb_per_gpu": 20}'""")


def test_the_users_emulator_config_wins_and_needs_no_sizing(tmp_path: Path, gemma: Deployment) -> None:
    check = _check(gemma, "defaults")  # nothing built, and config.json cannot count Gemma
    config, said = _emulator_config(tmp_path, gemma, check, {"weight_gb_per_gpu": 20, "gpu_memory_gb": 80})
    assert config == {EMULATOR_WEIGHT_KEY: 20, EMULATOR_GPU_MEMORY_KEY: 80} and said == []
    built, _ = _emulator_config(
        tmp_path, gemma, _check(gemma, "defaults", model=GEMMA_BUILD), {"vision_weight_gb_per_gpu": 0}
    )
    assert built[EMULATOR_VISION_KEY] == 0 and built[EMULATOR_WEIGHT_KEY] > 21


def test_gpu_weights_prefers_the_build_and_counts_config_json_otherwise() -> None:
    qwen36 = CheckpointFacts(json.loads(QWEN36_CONFIG.read_text()))
    built = gpu_weights(qwen36, GEMMA_BUILD, None, 1)
    assert (built.source, built.vision_built) == ("model build", True)
    assert built.detail == "SGLang's Gemma3ForConditionalGeneration, built on the meta device (TP rank 0 of 1)"
    counted = gpu_weights(qwen36, None, None, 2)
    size = qwen36.size()
    assert counted == GpuWeights(
        tp=2,
        text_bytes=size.text_params,  # two bytes a parameter, halved
        vision_bytes=size.vision_params,
        vision_built=None,
        draft_bytes=round((size.mtp_params - size.mtp_replicated_params) / 2 + size.mtp_replicated_params) * 2,
        source="config.json",
        detail="counted from config.json (preflight built no model)",
    )
    assert counted.model_gib == pytest.approx(size.weight_gib_per_gpu(2, vision=True, vision_replicated=False))
