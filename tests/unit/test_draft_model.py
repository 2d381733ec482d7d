"""A separate draft model is a field of [launch.speculative]: its path on the runner for the server,
its config.json here for preflight; a missing draft config, or a runner-only path left in raw flags,
is one line naming where it belongs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglperf.model.deployment_file import DeploymentError, load
from sglperf.sglang.argv import Option, ParserInfo
from sglperf.sglang.flags import FlagError, launch_plan

from ..support.project import ROOT

TARGET = ROOT / "models" / "tiny-qwen3" / "config.json"
DRAFT = ROOT / "models" / "tiny-qwen3" / "eagle3-draft" / "config.json"
HEAD = f"""\
[model]
key = "tiny-qwen3"
served_path = "/models/tiny-qwen3"
config = "{TARGET}"

[runner]
name = "1xL40S"
gpu_count = 1
gpu_name = "NVIDIA L40S"
compute_capability = "8.9"
memory_gib = 48

[launch]
tp_size = 1

[launch.speculative]
algorithm = "EAGLE3"
num_steps = 2
num_draft_tokens = 3
"""
FLAGS = ("--speculative-algorithm", "--speculative-num-steps", "--speculative-num-draft-tokens")
PARSER = ParserInfo(
    "0.5.23",
    dict.fromkeys(
        (*FLAGS, "--speculative-eagle-topk", "--speculative-draft-model-path", "--tp-size"), Option(dest="x")
    ),
)


def _write(tmp_path: Path, speculative: str, variant: str = "") -> Path:
    path = tmp_path / "draft.toml"
    path.write_text(HEAD + speculative + '\n[[variants]]\nid = "eagle3"\n' + variant)
    return path


def _argv_after(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_preflight_reads_the_draft_config_here_and_the_server_gets_the_runner_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODELS", "/srv/models")
    deployment = load(_write(tmp_path, f'draft_model = {{ served_path = "$MODELS/EAGLE3", config = "{DRAFT}" }}'))
    variant = deployment.variants[0]
    here = launch_plan(deployment, variant, PARSER, str(TARGET.parent), ("Qwen3ForCausalLM",), on_runner=False)
    assert _argv_after(here.argv, "--speculative-draft-model-path") == str(DRAFT.parent)
    there = launch_plan(deployment, variant, PARSER, "/models/tiny-qwen3", ("Qwen3ForCausalLM",))
    assert _argv_after(there.argv, "--speculative-draft-model-path") == "/srv/models/EAGLE3"
    monkeypatch.delenv("MODELS")
    with pytest.raises(FlagError, match=r"draft_model.served_path '\$MODELS/EAGLE3' names an environment variable"):
        launch_plan(deployment, variant, PARSER, "/models/tiny-qwen3", ("Qwen3ForCausalLM",))


def test_a_missing_draft_config_is_one_line_naming_the_field(tmp_path: Path) -> None:
    path = _write(tmp_path, 'draft_model = { served_path = "/m/d", config = "nowhere/config.json" }')
    with pytest.raises(DeploymentError) as excinfo:
        load(path)
    message = str(excinfo.value)
    assert message.startswith(f"{path}: launch.speculative.draft_model.config: ") and "\n" not in message
    assert "does not exist (preflight reads the draft's config.json" in message


def test_a_runner_only_draft_path_in_flags_says_where_it_belongs(tmp_path: Path) -> None:
    deployment = load(_write(tmp_path, "", 'flags = ["--speculative-draft-model-path", "/models/EAGLE3-x"]\n'))
    with pytest.raises(FlagError) as excinfo:
        launch_plan(deployment, deployment.variants[0], PARSER, str(TARGET.parent), (), on_runner=False)
    assert "--speculative-draft-model-path /models/EAGLE3-x: a path on the runner" in str(excinfo.value)
    assert 'draft_model = { served_path = "/models/EAGLE3-x"' in str(excinfo.value)
