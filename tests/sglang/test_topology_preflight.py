"""A disaggregated deployment's roles resolved by SGLang's own code (issue 56): 0.5.15 -> 0.5.16 on an L40S pool.

SGLang 0.5.15 turned every CUDA graph off on a prefill server (pd_disaggregation_hook.py sets the global
disable_cuda_graph); 0.5.16 replaced that with a role rule that disables only the decode graph there, so the
prefill server's prefill graph went from off to on with no flag changed. The decode servers lost their prefill
graph in the same release. Each role is its own variant ("defaults.prefill"), resolved with its role's flags.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from ..support.project import ROOT, SGLPERF, SglangPython

LLAMA = ROOT / "tests" / "data" / "hf-configs" / "Llama-3.1-8B-Instruct" / "config.json"
PD_DEPLOYMENT = f"""\
[model]
key = "llama-3.1-8b-instruct"
served_path = "/models/llama-3.1-8b-instruct"
config = "{LLAMA}"

[runner]
name = "l40s-pool"
gpu_count = 2
gpu_name = "NVIDIA L40S"
compute_capability = "8.9"
memory_gib = 48
nodes = 2

[launch]
tp_size = 1

[topology]
roles = [
  {{ name = "prefill", kind = "prefill", instances = 1, expect = {{ prefill_cuda_graph = true }} }},
  {{ name = "decode", kind = "decode", instances = 2 }},
]

[[variants]]
id = "defaults"

[[workloads]]
id = "decode-chat"
prompts = "{ROOT / "data" / "prompts" / "chat.jsonl"}"
output_len = 32
concurrency = [32]
"""


def _upgrade_check(folder: Path, *extra: str) -> list[str]:
    path = folder / "pd.toml"
    path.write_text(PD_DEPLOYMENT)
    proc = subprocess.run(
        [SGLPERF, "upgrade-check", str(path), "--from", "0.5.15", "--to", "0.5.16", *extra],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.splitlines()


def test_the_prefill_roles_prefill_graph_turns_on_at_0_5_16_by_the_role_rule(
    sglang_python: SglangPython, tmp_path: Path
) -> None:
    sglang_python("0.5.15"), sglang_python("0.5.16")
    lines = _upgrade_check(tmp_path)
    intent = next(ln for ln in lines if "pd/defaults.prefill" in ln and "prefill_cuda_graph" in ln)
    assert "fail->pass" in intent, intent
    # The field under the intent, with SGLang's rule on each side: 0.5.15's global switch from the PD hook.
    at = lines.index("  pd/defaults.prefill:")
    block = lines[at : at + 12]
    assert "    cuda_graph_config.prefill.backend: 'disabled' -> 'breakable'" in block, block
    assert any("handle_pd_disaggregation (pd_disaggregation_hook.py:77)" in ln for ln in block), block
    # The decode role, resolved with --disaggregation-mode decode, lost its prefill graph by the new role rule.
    at = lines.index("  pd/defaults.decode:")
    block = lines[at : at + 6]
    assert "    cuda_graph_config.prefill.backend: 'breakable' -> 'disabled'" in block, block
    assert any("_apply_cuda_graph_disaggregation_roles" in ln for ln in block), block


def test_the_walk_names_0_5_16_for_the_prefill_role(sglang_python: SglangPython, tmp_path: Path) -> None:
    sglang_python("0.5.15"), sglang_python("0.5.16")
    lines = _upgrade_check(tmp_path, "--walk")
    assert "Releases walked: 0.5.15 -> 0.5.16" in lines, lines
    moved = [ln for ln in lines if "0.5.16: cuda_graph_config.prefill.backend: 'disabled' -> 'breakable'" in ln]
    assert moved, "\n".join(lines)


def test_each_role_is_spelled_with_its_own_flags(sglang_python: SglangPython, tmp_path: Path) -> None:
    """The role's mode is in its argv, written by sglperf; a user's --disaggregation-mode or --port is refused."""
    path = tmp_path / "pd.toml"
    path.write_text(PD_DEPLOYMENT)
    proc = subprocess.run(
        [SGLPERF, "explain", str(path), "--sglang-version", "0.5.16"], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr
    argv = [ln for ln in proc.stdout.splitlines() if ln.startswith("  argv:")]
    assert any("--disaggregation-mode prefill" in ln for ln in argv) and any(
        "--disaggregation-mode decode" in ln for ln in argv
    ), argv
    for flag, why in (("--disaggregation-mode", "set by the role's kind"), ("--port", "picks a free port")):
        path.write_text(PD_DEPLOYMENT.replace('id = "defaults"', f'id = "defaults"\nflags = ["{flag}", "1"]'))
        proc = subprocess.run(
            [SGLPERF, "preflight", str(path), "--sglang-version", "0.5.16"], capture_output=True, text=True, timeout=900
        )
        assert proc.returncode != 0
        assert f"{flag} is not yours to set: " in proc.stdout + proc.stderr and why in proc.stdout + proc.stderr


def test_the_manifests_spell_each_role_as_the_release_does(sglang_python: SglangPython, tmp_path: Path) -> None:
    sglang_python("0.5.16")
    """`sglperf manifests`: one LeaderWorkerSet per role (instances as replicas, nodes as the group's size),
    each role's argv as the release accepts it, the router finding the leaders by their labels."""
    path = tmp_path / "pd.toml"
    # 2 decode instances of 2 nodes each, and the prefill server's node: 5 nodes of the pool.
    path.write_text(
        PD_DEPLOYMENT.replace("nodes = 2\n", "nodes = 5\n").replace(
            '{ name = "decode", kind = "decode", instances = 2 }',
            '{ name = "decode", kind = "decode", instances = 2, tp_size = 2, nodes = 2 }',
        )
    )
    proc = subprocess.run(
        [SGLPERF, "manifests", str(path), "--sglang-version", "0.5.16", "--image", "sglang:test"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    objects = list(yaml.safe_load_all(proc.stdout))
    lws = {o["metadata"]["name"]: o for o in objects if o["kind"] == "LeaderWorkerSet"}
    assert sorted(lws) == ["pd-defaults-decode", "pd-defaults-prefill"]
    decode = lws["pd-defaults-decode"]["spec"]
    assert decode["replicas"] == 2 and decode["leaderWorkerTemplate"]["size"] == 2
    worker = decode["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    command = worker["command"]
    assert command[command.index("--disaggregation-mode") + 1] == "decode"
    assert command[command.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    assert command[command.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):20000"
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1  # tp 2 over 2 nodes
    prefill = lws["pd-defaults-prefill"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert prefill["metadata"]["annotations"] == {"sglang.ai/bootstrap-port": "8998"}
    router = next(o for o in objects if o["kind"] == "Deployment")
    argv = router["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--pd-disaggregation" in argv and "--prefill-selector" in argv and "--decode-selector" in argv
    assert {o["kind"] for o in objects} >= {"ServiceAccount", "Role", "RoleBinding", "Service"}
    assert "none applied" in proc.stderr


def test_every_rank_of_a_multi_node_role_is_resolved_and_compared(sglang_python: SglangPython, tmp_path: Path) -> None:
    """A decode instance of tp 2 over 2 nodes: rank 1 resolved with its own --node-rank, compared with rank 0."""
    sglang_python("0.5.23")
    path = tmp_path / "pd.toml"
    path.write_text(
        PD_DEPLOYMENT.replace("nodes = 2\n", "nodes = 3\n").replace(
            '{ name = "decode", kind = "decode", instances = 2 }',
            '{ name = "decode", kind = "decode", tp_size = 2, nodes = 2 }',
        )
    )
    proc = subprocess.run(
        [SGLPERF, "preflight", str(path), "--sglang-version", "0.5.23"], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pd/defaults.decode: every rank resolves alike" in proc.stdout.splitlines()
    explained = subprocess.run(
        [SGLPERF, "explain", str(path), "--sglang-version", "0.5.23", "--variant", "defaults.decode"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    argv = next(ln for ln in explained.stdout.splitlines() if ln.startswith("  argv:"))
    assert "--nnodes 2 --node-rank 0 --dist-init-addr 127.0.0.1:20000" in argv, argv
