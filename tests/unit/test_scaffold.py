"""`sglperf init`: what it writes from a model's config.json and the runner's GPUs, and what it refuses."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from sglperf.cli import EXIT_BAD_INPUT, main
from sglperf.model.deployment_file import DeploymentError, load
from sglperf.model.intent_names import SPECULATIVE, VISION_WEIGHTS_SKIPPED
from sglperf.model.resolution import ModelFacts
from sglperf.model.runner_profile import RunnerProfile
from sglperf.runtime.gpus import SIMULATED_ENV, Inventory
from sglperf.scaffold import (
    GITIGNORE_LINES,
    InitError,
    InitRequest,
    SizingRelease,
    command_prefix,
    init,
    summary,
)
from sglperf.testing.fake_nvml import FakeGpu, FakeNvml
from sglperf.testing.standin_resolver import StandInResolver

from .test_preflight_standin import PARSER

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
    assert (tmp_path / ".gitignore").read_text() == "node_modules/\nresults/\n# sglperf\nbaselines/**/*.lock\n.venv/\n"
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


# --- issue 53: a first deployment of one's own (Gemma-3) ------------------------------------------------

GEMMA = CONFIGS / "gemma-3-12b-it"
# What SGLang 0.5.23 builds of Gemma-3-12B-it at TP 1 (tests/sglang/test_gemma_first_deployment.py reads it
# from the real build).
GEMMA_BUILD = ModelFacts(
    architecture="Gemma3ForConditionalGeneration",
    vision_tower="SiglipVisionModel",
    moe_layers=0,
    param_bytes_per_rank=24_374_650_080,
    vision_param_bytes_per_rank=833_732_064,
)
TWO_L40S = {**L40S, "gpu_count": 2}


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _sizing(model: ModelFacts | None, asked: list[RunnerProfile] | None = None) -> SizingRelease:
    def resolver(runner: RunnerProfile, cache: Path) -> StandInResolver:
        if asked is not None:
            asked.append(runner)
        return StandInResolver(PARSER, model=model)

    return SizingRelease("0.5.23", resolver)


def test_init_sizes_gemma_by_the_releases_own_build_of_the_model(tmp_path: Path) -> None:
    """config.json counting cannot size Gemma-3: the newest release built here does, as preflight builds it."""
    asked: list[RunnerProfile] = []
    said: list[str] = []
    request = InitRequest(model=GEMMA, root=tmp_path, served_path="/m", **TWO_L40S)  # type: ignore[arg-type]
    result = init(request, inventory=no_gpus, sizing=_sizing(GEMMA_BUILD, asked), progress=said.append)
    deployment = load(result.deployment)
    assert deployment.launch.tp_size == 1  # 22.7 GiB of weights on a 48 GiB GPU, though the runner has two
    assert "tp_size = 1  # weights 22.7 GiB, 22.7 GiB per GPU of 48 GiB" in result.deployment.read_text()
    assert (
        "weights 22.7 GiB, as SGLang 0.5.23 builds the model (Gemma3ForConditionalGeneration, on the meta device)"
        in (result.notes)
    )
    assert [r.gpu_count for r in asked] == [2] and said[0].startswith("sizing Gemma3ForConditionalGeneration with")


def test_init_without_a_build_counts_config_json_and_says_so(tmp_path: Path) -> None:
    result = init(InitRequest(model=LLAMA, root=tmp_path, served_path="/m", **L40S), inventory=no_gpus)  # type: ignore[arg-type]
    (note,) = result.notes
    assert note.startswith("weights 15.0 GiB, counted from config.json (no managed SGLang environment is built;")
    failed = init(
        InitRequest(model=LLAMA, root=tmp_path / "b", served_path="/m", **L40S),  # type: ignore[arg-type]
        inventory=no_gpus,
        sizing=_sizing(None),
    )
    assert failed.notes == ["weights 15.0 GiB, counted from config.json (SGLang 0.5.23 built no model)"]


def test_when_nothing_can_size_the_model_tp_is_every_gpu_in_one_line_naming_tp(tmp_path: Path) -> None:
    request = InitRequest(model=GEMMA, root=tmp_path, served_path="/m", **TWO_L40S)  # type: ignore[arg-type]
    result = init(request, inventory=no_gpus)
    assert load(result.deployment).launch.tp_size == 2
    (note,) = result.notes
    assert note.startswith("tp_size 2 (every GPU): sglperf cannot size this model's weights (no managed SGLang")
    assert "model_type 'gemma3' is not supported" in note and note.endswith("; give --tp N") and "\n" not in note


def test_gitignore_keeps_the_venv_out_and_next_steps_name_the_venvs_commands(tmp_path: Path) -> None:
    result = init(InitRequest(model=LLAMA, root=tmp_path, served_path="/m", **L40S), inventory=no_gpus)  # type: ignore[arg-type]
    assert ".venv/" in (tmp_path / ".gitignore").read_text().splitlines()
    assert command_prefix(tmp_path, tmp_path / ".venv") == ".venv/bin/"  # as docs/getting-started.md installs it
    elsewhere = tmp_path.parent / "elsewhere-venv"
    assert command_prefix(tmp_path, elsewhere) == f"{elsewhere}/bin/"
    lines = summary(result, tmp_path, "0.5.23", ".venv/bin/")
    assert "  .venv/bin/sglperf preflight deployments/llama-3.1-8b-instruct.toml --sglang-version 0.5.23" in lines
    assert "  .venv/bin/pytest -m preflight --sglang-version=0.5.23" in lines
    again = tmp_path / "again"
    again.mkdir()
    (again / ".gitignore").write_text("/results\n.venv\n")  # the same folders, spelt otherwise
    init(InitRequest(model=LLAMA, root=again, served_path="/m", **L40S), inventory=no_gpus)  # type: ignore[arg-type]
    assert (again / ".gitignore").read_text() == "/results\n.venv\n# sglperf\nbaselines/**/*.lock\n"


def test_a_hub_config_cannot_add_toml_to_the_deployment(tmp_path: Path) -> None:
    """The audit: architectures were written into the TOML unescaped, so a config.json could add [launch.env]."""
    model = tmp_path / "evil"
    model.mkdir()
    config = json.loads((LLAMA / "config.json").read_text())
    config["architectures"] = ['LlamaForCausalLM\n[launch.env]\nLD_PRELOAD = "/tmp/evil.so"\n#', 'X"\\\x7f']
    (model / "config.json").write_text(json.dumps(config))
    served = '/m"\n[runner]\x7f'  # DEL, which JSON's escaping leaves raw and TOML refuses raw
    deployment = load(_init(tmp_path / "repo", model, served_path=served, gpu_name="L40S\\"))
    assert deployment.launch.env == {} and deployment.model.served_path == served
    assert deployment.runner.gpu_name == "L40S\\"
    # The architectures are shown, escaped, in the header comment and the description: one line each.
    shown = 'LlamaForCausalLM\\n[launch.env]\\nLD_PRELOAD = "/tmp/evil.so"\\n#, X"\\\\x7f'
    assert deployment.description == f"{shown} on 1x L40S\\, TP 1"
    text = (tmp_path / "repo" / "deployments" / "evil.toml").read_text()
    assert (
        text.splitlines()[0]
        == f"# Written by `sglperf init` from {shown}'s config.json. Every field: sglperf docs, Deployments."
    )


def test_a_failed_init_leaves_nothing_and_the_corrected_retry_works(tmp_path: Path) -> None:
    """The audit: a failed init left 3-5 files behind, and the corrected retry was refused ("exists already")."""
    (tmp_path / "prompts").write_text("a file where init puts a folder")  # writing fails half-way
    before = _files(tmp_path)
    with pytest.raises(InitError, match=r"prompts/chat.jsonl: cannot write it: Not a directory .*left nothing behind"):
        _init(tmp_path, served_path="/m")
    assert _files(tmp_path) == before
    (tmp_path / "prompts").unlink()
    _init(tmp_path, served_path="/m")  # the same command again, the cause removed
    with pytest.raises(InitError, match="--gpus 0: a runner has 1 to 64 GPUs"):
        _init(tmp_path / "other", gpu_count=0)  # a bad flag: nothing is written at all
    assert not (tmp_path / "other").exists()


def test_a_fifo_gitignore_is_not_read_for_ever(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / ".gitignore")
    result = init(InitRequest(model=LLAMA, root=tmp_path, served_path="/m", **L40S), inventory=no_gpus)  # type: ignore[arg-type]
    assert any(note.startswith(f"{tmp_path / '.gitignore'}: cannot read it (") for note in result.notes)


def test_ctrl_d_at_a_question_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    def ended(question: str) -> str:
        raise EOFError

    with pytest.raises(InitError, match=r"no answer to 'How many GPUs does the runner have\?': the input ended"):
        init(InitRequest(model=LLAMA, root=tmp_path, served_path="/m"), ended, inventory=no_gpus)
    assert _files(tmp_path) == set()


def test_an_over_long_path_is_one_line(tmp_path: Path) -> None:
    long = "d" * 300
    with pytest.raises(InitError, match=r"cannot (use|read) it: File name too long"):
        _init(tmp_path / long, served_path="/m")
    with pytest.raises(InitError, match=r"cannot read it: File name too long"):
        _init(tmp_path / "repo", tmp_path / long)
    assert _files(tmp_path) == set()
