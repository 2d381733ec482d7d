"""Managed SGLang environments: built, found, listed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sglperf.model.progress import Progress, silent
from sglperf.model.runner_profile import CpuKernel
from sglperf.sglang import cpu_envs, envs


def build(versions: Sequence[str], cpu: CpuKernel | None = None, progress: Progress = silent) -> list[Path]:
    """Each release's environment (``cpu``: the one that serves on this CPU with that kernel), built where
    it is not yet; their interpreters."""
    if cpu:
        return [cpu_envs.ensure_cpu_env(v, progress, kernel=cpu).python for v in versions]
    return [envs.ensure_env(v, progress).python for v in versions]


def interpreters(versions: Sequence[str], cpu: CpuKernel | None = None) -> list[tuple[str, Path | None]]:
    """Each release's interpreter, or None where its environment is not built."""
    found: list[tuple[str, Path | None]] = []
    for version in versions:
        env = cpu_envs.cpu_env_for(version, cpu) if cpu else envs.env_for(version)
        ready = cpu_envs.cpu_env_ready(env) if cpu else env.ready
        found.append((version, env.python if ready else None))
    return found
