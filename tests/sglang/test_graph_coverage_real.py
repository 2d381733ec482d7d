"""Graph coverage against real releases' own resolution. The decode graph: a 24 GB GPU at TP 1 with a
workload at 32 in flight. 0.5.19 caps the decode graph at batch 24 for that memory tier
(handle_gpu_memory_settings), 0.5.20 raised it to 48 (sgl-project/sglang#37898). The cap each release
applies is read here from its own source, not from a table of ours; preflight must fail exactly where it
is below 32, quote the line that set it, and pass once the variant asks for coverage. The prefill graph:
below, in tokens."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from ..support.project import ROOT, SGLPERF, SglangPython, one_24gb_gpu_deployment, preflight_json

WORKLOAD_BATCH = 32

DEPLOYMENT = one_24gb_gpu_deployment(
    str(ROOT / "models" / "tiny-qwen3" / "config.json"),
    f"""\
[[variants]]
id = "defaults"

[[variants]]
id = "covered"
request = {{ decode_cuda_graph = true }}

[[workloads]]
id = "chat"
prompts = "{ROOT / "data" / "prompts" / "chat.jsonl"}"
output_len = 64
concurrency = [1, {WORKLOAD_BATCH}]
""",
)


def _source_cap(python: str, branch: str, cap: str) -> tuple[Path, int]:
    """The first number ``cap`` (a regex with one group) finds after the text ``branch`` in the release's
    own resolution (0.5.19+: arg_groups/memory_hook.py; before: server_args.py), and the file it is in."""
    package = next(Path(python).parent.parent.glob("lib/python3*/site-packages/sglang/srt"))
    for source in (package / "arg_groups" / "memory_hook.py", package / "server_args.py"):
        text = source.read_text() if source.exists() else ""
        at = text.find(branch)
        if at >= 0:
            found = re.search(cap, text[at:])
            assert found, f"{source}: no cap after {branch!r}"
            return source, int(found.group(1))
    raise AssertionError(f"{package}: no {branch!r} in its resolution")


def _tier_cap(python: str) -> tuple[Path, int]:
    """The decode graph's largest batch the release's own source gives a 20-35 GB GPU at TP < 4."""
    return _source_cap(python, "elif gpu_mem < 35 * 1024:", r"max_bs = (\d+)")


@pytest.mark.parametrize("version", [pytest.param("0.5.13", marks=pytest.mark.long), "0.5.19", "0.5.20", "0.5.23"])
def test_a_batch_above_the_releases_cap_fails_naming_the_rule_and_the_request_covers_it(
    version: str, sglang_python: SglangPython, tmp_path: Path
) -> None:
    python = sglang_python(version)
    source, cap = _tier_cap(python)
    path = tmp_path / "coverage.toml"
    path.write_text(DEPLOYMENT)
    proc, found = preflight_json(path, version)
    records = {r["variant"]: r for r in found}
    assert set(records) == {"defaults", "covered"}, proc.stderr[-3000:]
    defaults, covered = records["defaults"], records["covered"]
    # Asked for, the graph is captured up to the workload's batch on every release, whatever its spelling.
    assert covered["status"] == "pass" and covered["actual"] == f"on, up to batch {WORKLOAD_BATCH}", covered
    if cap >= WORKLOAD_BATCH:
        assert proc.returncode == 0 and defaults["status"] == "pass", defaults
        assert defaults["actual"] == f"on, up to batch {cap}"
        return
    assert proc.returncode == 1 and defaults["status"] == "fail", defaults
    assert defaults["actual"] == f"on, up to batch {cap}: eager above"
    line = defaults["detail"].splitlines()[-1].strip()
    assert line.startswith(
        f"chat at concurrency {WORKLOAD_BATCH} decodes eager: SGLang {version} captures the decode graph up to "
        f"batch {cap}, below the workload's {WORKLOAD_BATCH}, set by "
    ), line
    assert "`elif gpu_mem < 35 * 1024`" in line and "raise it: request = { decode_cuda_graph = true }" in line
    # The line quoted is the release's own: the file and line named set exactly this cap.
    where = re.search(rf"\(({re.escape(source.name)}):(\d+)\)", line)
    assert where, line
    assert f"max_bs = {cap}" in source.read_text().splitlines()[int(where.group(2)) - 1]
    # Spelled as the release's parser has it: 0.5.19 added the per-phase flag, older ones had one.
    flag = "--cuda-graph-max-bs-decode" if source.name == "memory_hook.py" else "--cuda-graph-max-bs"
    assert f"that adds {flag} {WORKLOAD_BATCH})" in line


def test_the_upgrade_check_shows_the_cap_move_and_the_workload_covered(
    sglang_python: SglangPython, tmp_path: Path
) -> None:
    """0.5.19 -> 0.5.20: "on" on both sides, but the graph's size moved and the failure went away."""
    before, after = (_tier_cap(sglang_python(v))[1] for v in ("0.5.19", "0.5.20"))
    assert before < WORKLOAD_BATCH <= after  # what sgl-project/sglang#37898 changed
    path = tmp_path / "coverage.toml"
    path.write_text(DEPLOYMENT)
    proc = subprocess.run(
        [SGLPERF, "upgrade-check", str(path), "--from", "0.5.19", "--to", "0.5.20"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "coverage/defaults" in ln and "decode_cuda_graph" in ln)
    assert f"on, up to batch {before}: eager above" in line and f"-> on, up to batch {after}" in line, line
    assert "fail->pass" in line
    # The field behind the "on", with the rule on each side: the memory tier's branch in each release.
    lines = proc.stdout.splitlines()
    at = lines.index(f"    cuda_graph_config.decode.max_bs: {before} -> {after}")
    assert lines[at + 1].startswith("        0.5.19: handle_gpu_memory_settings (memory_hook.py:"), lines[at + 1]
    assert lines[at + 2].startswith("        0.5.20: handle_gpu_memory_settings (memory_hook.py:"), lines[at + 2]


def test_the_walk_names_the_release_that_raised_the_cap(sglang_python: SglangPython, tmp_path: Path) -> None:
    """0.5.19 -> 0.5.21 through 0.5.20: the cap moved at 0.5.20, by the memory tier's rule there."""
    before, after = (_tier_cap(sglang_python(v))[1] for v in ("0.5.19", "0.5.20"))
    path = tmp_path / "coverage.toml"
    path.write_text(DEPLOYMENT)
    proc = subprocess.run(
        [SGLPERF, "upgrade-check", str(path), "--from", "0.5.19", "--to", "0.5.21", "--walk"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "Releases walked: 0.5.19 -> 0.5.20 -> 0.5.21" in lines
    at = lines.index(f"    0.5.20: cuda_graph_config.decode.max_bs: {before} -> {after}")
    # The rule that moved it, labelled with the release whose code it quotes.
    assert lines[at + 1].strip().startswith("0.5.20: handle_gpu_memory_settings (memory_hook.py:"), lines[at + 1]
    assert "elif gpu_mem < 35 * 1024" in lines[at + 1]


# The prefill graph, in tokens. Every release from 0.5.13 caps it at 4096 tokens for a model whose path
# names Llama 2 ("remove this after the issue is fixed"), while an 80 GB GPU prefills in chunks of 8192:
# a 6000-token prompt prefills eager on a graph that reads "on".
PROMPT_TOKENS = 6000
LLAMA2_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
}
LLAMA2_DEPLOYMENT = f"""\
[model]
key = "llama2-tiny"
served_path = "/models/Llama-2-7b-tiny"
config = "Llama-2-7b-tiny/config.json"

[runner]
name = "1xH100"
gpu_count = 1
gpu_name = "NVIDIA H100 80GB HBM3"
compute_capability = "9.0"
memory_gib = 80
sm_count = 132

[launch]
tp_size = 1

[expect]
prefill_cuda_graph = true

[[variants]]
id = "defaults"

[[variants]]
id = "covered"
request = {{ prefill_cuda_graph = true }}

[[workloads]]
id = "long"
synthetic = {{ kind = "random", count = 4, input_len = {PROMPT_TOKENS} }}
output_len = 16
"""


def _llama2_cap(python: str) -> tuple[Path, int]:
    """The prefill graph's largest size the release's own source gives a Llama-2 path, and its file."""
    return _source_cap(python, '"llama-2" in', r"max_(?:bs|tokens), (\d+)")


@pytest.mark.parametrize("version", [pytest.param("0.5.13", marks=pytest.mark.long), "0.5.19", "0.5.23"])
def test_a_prompt_above_the_prefill_graphs_size_fails_naming_the_rule_and_the_request_covers_it(
    version: str, sglang_python: SglangPython, tmp_path: Path
) -> None:
    source, cap = _llama2_cap(sglang_python(version))
    assert cap < PROMPT_TOKENS
    (tmp_path / "Llama-2-7b-tiny").mkdir()
    (tmp_path / "Llama-2-7b-tiny" / "config.json").write_text(json.dumps(LLAMA2_CONFIG))
    path = tmp_path / "llama2.toml"
    path.write_text(LLAMA2_DEPLOYMENT)
    proc, found = preflight_json(path, version)
    records = {r["variant"]: r for r in found}
    assert set(records) == {"defaults", "covered"}, proc.stderr[-3000:]
    defaults, covered = records["defaults"], records["covered"]
    # Asked for, the graph is captured past the prompt (rounded up to a size SGLang captures).
    assert covered["status"] == "pass" and covered["actual"] == "on, up to 6144 tokens", covered
    assert proc.returncode == 1 and defaults["status"] == "fail", defaults
    assert defaults["actual"] == f"on, up to {cap} tokens: eager above"
    line = defaults["detail"].splitlines()[-1].strip()
    assert line.startswith(
        f"long's prefills of {PROMPT_TOKENS} tokens (random prompts of up to {PROMPT_TOKENS} tokens) run eager: "
        f"SGLang {version} captures the prefill graph up to {cap} tokens, set by "
    ), line
    assert '"llama-2" in' in line and "For Llama2 series models" in line
    # The statement quoted is the release's own: the file and line named hold this cap.
    where = re.search(rf"\(({re.escape(source.name)}):(\d+)\)", line)
    assert where, line
    statement = source.read_text().splitlines()[int(where.group(2)) - 1 : int(where.group(2)) + 2]
    assert any(str(cap) in ln for ln in statement), statement
    # Spelled as the release's parser has it: 0.5.14 renamed the flag, 0.5.20 removed the old one.
    flag = "--cuda-graph-max-bs-prefill" if source.name == "memory_hook.py" else "--piecewise-cuda-graph-max-tokens"
    assert line.endswith(
        f"raise it: request = {{ prefill_cuda_graph = true }} in the variant (on SGLang {version} "
        f"that adds {flag} 6144)"
    ), line
