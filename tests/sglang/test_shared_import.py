"""One SGLang import for every deployment of a GPU model: what a shared worker resolves for a runner is what
a worker of that runner's own resolves (SGLang's answers about the GPUs are not carried from one runner to
the next), and runners of another GPU model get a worker of their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglperf import preflight
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import load
from sglperf.preflight.resolver import WorkerPool

from ..support.project import NEW_SGLANG, ROOT, SglangPython

TINY = ROOT / "models" / "tiny-qwen3" / "config.json"
RUNNERS = {
    "1xa6000": ("NVIDIA RTX A6000", "8.6", 48, 1),
    "2xa6000": ("NVIDIA RTX A6000", "8.6", 48, 2),
    "1x4090": ("NVIDIA GeForce RTX 4090", "8.9", 24, 1),
}


def _deployment(folder: Path, runner: str) -> Deployment:
    name, capability, memory, count = RUNNERS[runner]
    path = folder / f"{runner}.toml"
    path.write_text(
        f"""
[model]
key = "tiny"
served_path = "/models/tiny"
config = "{TINY}"
[runner]
name = "{runner}"
gpu_count = {count}
gpu_name = "{name}"
compute_capability = "{capability}"
memory_gib = {memory}
[launch]
tp_size = {count}
[[variants]]
id = "plain"
"""
    )
    return load(path)


def _effective(deployment: Deployment, resolver: preflight.Resolver) -> dict[str, Any]:
    (resolved,) = preflight.resolve_variants(deployment, resolver, without_requests=False)
    assert resolved.resolution is not None and resolved.resolution.effective is not None
    skip = {"random_seed", "model_path", "served_model_name", "tokenizer_path"}
    return {k: v for k, v in resolved.resolution.effective.items() if k not in skip}


def test_a_shared_worker_resolves_each_runner_as_its_own_would(sglang_python: SglangPython, tmp_path: Path) -> None:
    python = sglang_python(NEW_SGLANG)
    deployments = {runner: _deployment(tmp_path, runner) for runner in RUNNERS}
    alone = {}
    for runner, deployment in deployments.items():
        resolver = preflight.Resolver(python, deployment.runner, cache_dir=tmp_path / f"alone-{runner}")
        alone[runner] = _effective(deployment, resolver)
        resolver.close()
    pool = WorkerPool()
    try:
        shared = {
            runner: _effective(d, preflight.Resolver(python, d.runner, cache_dir=tmp_path / "shared", pool=pool))
            for runner, d in deployments.items()
        }
        # The two A6000 runners shared one import; the 4090, another GPU model, had its own.
        assert len(pool._workers) == 2
    finally:
        pool.close()
    assert shared == alone
    # The memory SGLang sized from differs between the runners, so the comparison could tell.
    assert alone["1xa6000"]["mem_fraction_static"] != alone["1x4090"]["mem_fraction_static"]
    assert alone["1xa6000"]["tp_size"] != alone["2xa6000"]["tp_size"]
