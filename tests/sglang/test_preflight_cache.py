"""The preflight cache around real SGLang 0.5.23 resolutions: damage of every kind is recomputed and said
once, never trusted; and the managed releases the documented commands find right after set-up."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sglperf import preflight
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import load
from sglperf.model.verdict import Status
from sglperf.sglang import bench_client, envs

from ..support.project import NEW_SGLANG, QWEN36, SglangPython


def _statuses(deployment: Deployment, resolver: preflight.Resolver) -> dict[tuple[str, str], Status]:
    try:
        return {(c.variant.id, v.intent): v.status for c in preflight.check(deployment, resolver) for v in c.verdicts}
    finally:
        resolver.close()


def _cached_run(sglang_python: Any, cache: Path) -> tuple[Deployment, str, dict[tuple[str, str], Status]]:
    """qwen36 resolved once by SGLang 0.5.23 into ``cache``: (deployment, python, the verdicts)."""
    deployment = load(QWEN36)
    python = sglang_python(NEW_SGLANG)
    return deployment, python, _statuses(deployment, preflight.Resolver(python, deployment.runner, cache_dir=cache))


@pytest.mark.needs_sglang
def test_a_damaged_preflight_cache_is_recomputed_and_said_once(sglang_python: SglangPython, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    deployment, python, before = _cached_run(sglang_python, cache)
    entries = sorted(cache.glob("*.json"))
    damages = [b"\xff\xfe not utf-8", b"{}", b"[]", b'{"logs": "x"}']
    for path, damage in zip(entries, damages * len(entries)):
        path.write_bytes(damage)
    said: list[str] = []
    after = _statuses(deployment, preflight.Resolver(python, deployment.runner, cache_dir=cache, progress=said.append))
    assert after == before
    # Besides the progress line of importing SGLang to recompute, one line for the damage, however many entries.
    damaged = [line for line in said if not line.startswith("importing SGLang")]
    assert len(damaged) == 1 and "recomputing" in damaged[0], said
    assert all(json.loads(p.read_text()) for p in cache.glob("*.json"))  # healed on disk too


@pytest.mark.needs_sglang
def test_cache_damage_that_is_not_ours_to_remove_is_worked_around_and_a_wrong_release_never_trusted(
    sglang_python: SglangPython, tmp_path: Path
) -> None:
    """A folder where an entry should be (left alone, that entry not cached), JSON nested 200k deep,
    a well-formed release entry of another release, and a cache path that is a file."""
    cache = tmp_path / "cache"
    deployment, python, before = _cached_run(sglang_python, cache)
    entries = sorted(cache.glob("*.json"))
    (release,) = [p for p in entries if "sglang_version" in json.loads(p.read_text())]
    others = [p for p in entries if p != release]
    record = json.loads(release.read_text())
    release.write_text(json.dumps({**record, "sglang_version": "0.0.1"}))
    others[0].unlink()
    others[0].mkdir()
    others[1].write_bytes(b"[" * 200_000 + b"]" * 200_000)
    said: list[str] = []
    second = preflight.Resolver(python, deployment.runner, cache_dir=cache, progress=said.append)
    assert second.release().version == NEW_SGLANG
    assert _statuses(deployment, second) == before and others[0].is_dir()
    assert json.loads(release.read_text())["sglang_version"] == NEW_SGLANG
    assert all("Traceback" not in line for line in said) and any("recomputing" in line for line in said), said
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    said.clear()
    third = preflight.Resolver(python, deployment.runner, cache_dir=not_a_folder, progress=said.append)
    assert _statuses(deployment, third) == before
    assert any("preflight cache not used" in line and "is a file" in line for line in said), said


@pytest.mark.needs_sglang
def test_the_documented_preflight_works_right_after_set_up(sglang_python: SglangPython, tmp_path: Path) -> None:
    """The harness venv has no SGLang: the newest managed release is used, and said."""
    sglang_python(NEW_SGLANG)
    said: list[str] = []
    chosen = envs.choose_python(progress=said.append)
    assert chosen == str(envs.env_for(NEW_SGLANG).python) or "sglang-" in chosen
    assert said and "using the managed SGLang" in said[0]
    assert os.path.exists(chosen)


@pytest.mark.parametrize(
    ("version", "module"), [("0.5.13", "sglang.bench_serving"), (NEW_SGLANG, "sglang.benchmark.serving")]
)
def test_bench_serving_is_found_where_each_release_keeps_it(
    sglang_python: SglangPython, version: str, module: str
) -> None:
    # 0.5.23 moved it and deprecates the old path; 0.5.13 has only the old one.
    assert bench_client.bench_serving_module(sglang_python(version)) == module
