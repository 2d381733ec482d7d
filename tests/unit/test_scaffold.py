"""`sglperf init`: what it writes from a model's config.json and the runner's GPUs, and what it refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sglperf.cli import EXIT_BAD_INPUT, main
from sglperf.model.deployment_file import DeploymentError, load
from sglperf.model.intent_names import SPECULATIVE, VISION_WEIGHTS_SKIPPED
from sglperf.runtime.gpus import SIMULATED_ENV, Inventory
from sglperf.scaffold import GITIGNORE_LINES, InitError, InitRequest, init
from sglperf.testing.fake_nvml import FakeGpu, FakeNvml

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "hf-configs"
LLAMA = CONFIGS / "Llama-3.1-8B-Instruct"
EAGLE3 = CONFIGS / "EAGLE3-LLaMA3.1-Instruct-8B"
L40S = {"gpu_count": 1, "gpu_name": "NVIDIA L40S", "memory_gib": 48.0, "compute_capability": "8.9"}


def no_gpus() -> Inventory:
    return Inventory((), "none")


def _init(root: Path, model: Path = LLAMA, **fields: object) -> Path:
    request = InitRequest(model=model, root=root, **{**L40S, **fields})  # type: ignore[arg-type]
    return init(request, inventory=no_gpus).deployment


def test_a_text_only_model_gets_the_graph_and_overlap_intents_and_nothing_it_cannot_have(tmp_path: Path) -> None:
    deployment = load(_init(tmp_path, served_path="/models/Llama-3.1-8B-Instruct"))
    assert deployment.key == "llama-3.1-8b-instruct"
    assert deployment.model.served_path == "/models/Llama-3.1-8B-Instruct"
    assert deployment.expect == {"prefill_cuda_graph": True, "decode_cuda_graph": True, "overlap_schedule": True}
    assert [v.id for v in deployment.variants] == ["defaults"]  # no vision tower, no MTP head, no draft
    assert deployment.launch.tp_size == 1  # 15 GiB of weights on a 48 GiB GPU
    assert (deployment.runner.gpu_name, deployment.runner.compute_capability) == ("NVIDIA L40S", "8.9")
    assert (tmp_path / "models" / "llama-3.1-8b-instruct" / "config.json").read_bytes() == (
        LLAMA / "config.json"
    ).read_bytes()
    assert [w.id for w in deployment.workloads] == ["decode-chat"]
    assert (tmp_path / ".gitignore").read_text().splitlines()[1:] == list(GITIGNORE_LINES)
    ini = (tmp_path / "pytest.ini").read_text()
    assert "addopts = -ra" in ini and "sglperf_deployments = deployments" in ini


def test_a_multimodal_model_with_an_mtp_head_gets_a_text_only_and_an_mtp_variant(tmp_path: Path) -> None:
    model = tmp_path / "src" / "Qwen3.6-27B"
    shutil.copytree(ROOT / "models" / "qwen3.6-27b", model)
    repo = tmp_path / "repo"
    fields = {"gpu_count": 2, "gpu_name": "NVIDIA RTX A6000", "memory_gib": 48.0, "compute_capability": "8.6"}
    deployment = load(_init(repo, model, **fields))
    assert deployment.model.served_path == str(model.resolve())  # a folder given: it is the served path
    text_only, mtp = deployment.variant("text-only"), deployment.variant("mtp3")
    assert text_only.request == {VISION_WEIGHTS_SKIPPED: True}
    spec = deployment.expectations_for(mtp)[SPECULATIVE]
    assert (spec.algorithm, spec.num_steps, spec.num_draft_tokens) == ("NEXTN", 3, 4)
    assert deployment.launch.tp_size == 2  # ~50 GiB of bf16 weights do not fit 60% of one 48 GiB GPU


def test_a_draft_model_becomes_a_variant_with_its_config_and_runner_path(tmp_path: Path) -> None:
    path = _init(
        tmp_path,
        served_path="/models/Llama-3.1-8B-Instruct",
        draft=EAGLE3,
        draft_served_path="/models/EAGLE3-LLaMA3.1-Instruct-8B",
    )
    deployment = load(path)
    spec = deployment.expectations_for(deployment.variant("eagle3"))[SPECULATIVE]
    assert spec.algorithm == "EAGLE3" and spec.draft_model is not None
    assert spec.draft_model.served_path == "/models/EAGLE3-LLaMA3.1-Instruct-8B"
    draft = tmp_path / "models" / "llama-3.1-8b-instruct-draft" / "config.json"
    assert (path.parent / spec.draft_model.config).resolve() == draft.resolve()
    assert json.loads(draft.read_text())["architectures"] == ["LlamaForCausalLMEagle3"]
    assert deployment.expectations_for(deployment.variant("defaults")).get(SPECULATIVE) is None


def test_the_gpus_come_from_nvml_when_this_machine_is_the_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SIMULATED_ENV, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpu = FakeGpu(name="NVIDIA H100 80GB HBM3", memory_total_mib=81559, compute_capability=(9, 0))
    FakeNvml([gpu, FakeGpu(name=gpu.name, memory_total_mib=81559, compute_capability=(9, 0))]).patch(monkeypatch)
    path = init(InitRequest(model=LLAMA, root=tmp_path, served_path="/m")).deployment
    runner = load(path).runner
    assert (runner.gpu_count, runner.gpu_name, runner.memory_gib, runner.compute_capability) == (
        2,
        "NVIDIA H100 80GB HBM3",
        80.0,
        "9.0",
    )
    assert "[runner]  # from this machine's GPUs (NVML)" in path.read_text()


def test_without_gpus_or_flags_it_names_the_flags_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(InitError, match=r"no GPU is visible here; give --gpus, --gpu-name, --memory-gib, --compute-"):
        init(InitRequest(model=LLAMA, root=tmp_path, served_path="/m"), inventory=no_gpus)
    assert list(tmp_path.iterdir()) == []


def test_at_a_terminal_it_asks_again_until_an_answer_is_usable(tmp_path: Path) -> None:
    answers = iter(["", "1", "NVIDIA L40S", "lots", "48", "8,9", "8.9"])
    asked: list[str] = []

    def ask(question: str) -> str:
        asked.append(question)
        return next(answers)

    path = init(InitRequest(model=LLAMA, root=tmp_path, served_path="/m"), ask, inventory=no_gpus).deployment
    runner = load(path).runner
    assert (runner.gpu_count, runner.memory_gib, runner.compute_capability) == (1, 48.0, "8.9")
    assert len(asked) == 7  # the empty count, "lots" and "8,9" were each asked again


def test_it_never_overwrites_and_keeps_the_users_own_files(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("node_modules/\nresults/")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "mine"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n')
    result = init(InitRequest(model=LLAMA, root=tmp_path, served_path="/m", **L40S), inventory=no_gpus)  # type: ignore[arg-type]
    assert (tmp_path / ".gitignore").read_text() == "node_modules/\nresults/\n# sglperf\nbaselines/**/*.lock\n"
    assert not (tmp_path / "pytest.ini").exists()
    assert any("pyproject.toml: has a pytest configuration already" in note for note in result.notes)
    before = result.deployment.read_text()
    with pytest.raises(InitError, match="exists already; sglperf init writes only new files"):
        init(InitRequest(model=LLAMA, root=tmp_path, served_path="/m", **L40S), inventory=no_gpus)  # type: ignore[arg-type]
    assert result.deployment.read_text() == before


def test_a_config_that_is_not_a_models_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"hidden_size": 8}')
    with pytest.raises(InitError, match=r"config.json: has no 'architectures' list: is it the model's config.json\?"):
        _init(tmp_path / "repo", tmp_path / "m")
    with pytest.raises(InitError, match=r"nowhere: no such file \(give the model's folder"):
        _init(tmp_path / "repo", tmp_path / "nowhere")


def test_the_command_says_what_is_missing_in_one_line_without_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SIMULATED_ENV, "")
    monkeypatch.setattr("sglperf.runtime.gpus._from_nvml", lambda: None)
    monkeypatch.setattr("sglperf.runtime.gpus._from_nvidia_smi", lambda: None)
    code = main(["init", str(LLAMA), "--dir", str(tmp_path), "--no-input"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT and len(err.splitlines()) == 1
    assert err.startswith("sglperf: the runner's GPUs: no GPU is visible here; give --gpus")


def test_a_malformed_prompt_file_fails_the_deployment_at_load_naming_the_line(tmp_path: Path) -> None:
    path = _init(tmp_path, served_path="/m")
    prompts = tmp_path / "prompts" / "chat.jsonl"
    prompts.write_text(prompts.read_text() + '{"id": "x", "messages": [{"role": "usr", "content": "hi"}]}\n')
    with pytest.raises(DeploymentError) as caught:
        load(path)
    assert str(caught.value) == (
        f"{path}: workloads[0].prompts: {prompts.resolve()}:5: messages[0] (prompt 'x'): role 'usr' is not one of "
        "assistant, system, user"
    )
