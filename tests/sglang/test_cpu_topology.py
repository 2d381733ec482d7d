"""A [topology] on real SGLang CPU servers behind the real sglang-router (issue 56), with no native kernel
(torch_native: any x86-64 CPU).

- Someone else's deployment, attached through its router: two replicas started here with different
  --max-running-requests; sglperf reads each worker at its own address and fails naming the field and the worker.
- The same two replicas as Slurm job steps (runner.launcher = "slurm") on a single-node cluster from the
  distribution's packages: measured through the router; one step killed ends every step (the job cancelled), the
  run says so in one line, and no process is left.
deployments/tiny-cpu-replicas.toml, launched locally, runs in ci/cpu-tier.sh's first pass like the other
deployments.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sglperf.model.deployment_file import load
from sglperf.runtime import router, server
from sglperf.session import LiveOptions, LiveSession, PreflightSession
from sglperf.session.topology import RoutedServers
from sglperf.sglang import cpu_envs
from sglperf.testing import tiny_models

from ..support.cpu_tier import ROOT, TINY_MODELS_ENV
from ..support.slurm_cluster import ClusterInfo, running_cluster

pytestmark = [pytest.mark.needs_sglang, pytest.mark.quiet_host]
REPLICAS = ROOT / "deployments" / "tiny-cpu-replicas.toml"
SGLANG_VERSION = "0.5.23"


@pytest.fixture(scope="module")
def native() -> tuple[str, Path]:
    """The torch-native SGLang environment's interpreter and the tiny models (any x86-64 CPU)."""
    env = cpu_envs.ensure_cpu_env(SGLANG_VERSION, lambda m: print(m, file=sys.stderr), kernel="torch-native")
    return str(env.python), tiny_models.ensure(str(env.python), tiny_models.default_cache())


@pytest.fixture
def drifting_replicas(native: tuple[str, Path], tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """Two real CPU servers of tiny-cpu-replicas.toml's launch, one with --max-running-requests 4 and one with 8,
    behind a real router: what a hand-edited launch script leaves behind."""
    python, models = native
    deployment = load(REPLICAS)
    base = ["--model-path", str(models / "tiny-qwen3"), *deployment.launch.extra_flags]
    workers = [
        server.Server(
            server.ServerSpec(
                name=f"drift-{cap}",
                python=python,
                argv=(*base, "--max-running-requests", str(cap)),
                env=deployment.launch.env,
                log_path=tmp_path / f"drift-{cap}.log",
                startup_timeout_s=600,
            )
        )
        for cap in (4, 8)
    ]
    started: list[server.Server] = []
    try:
        for worker in workers:
            worker.wait_healthy()
            started.append(worker)
        plan = router.RouterPlan(workers=tuple(w.base_url for w in workers))
        front = router.start_router(plan, router.router_spec(plan, "drift-router", tmp_path / "router.log", 120))
        started.append(front)
        yield front.base_url, [w.base_url for w in workers]
    finally:
        for worker in [*workers, *started]:
            worker.stop()


def test_attached_replicas_that_differ_fail_naming_the_field_and_the_worker(
    drifting_replicas: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, workers = drifting_replicas
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(REPLICAS),
            "--sglang-url",
            url,
            "--sglang-version",
            SGLANG_VERSION,
            "-p",
            "no:cacheprovider",
            "--results-dir",
            str(tmp_path / "results"),
            "-k",
            "live",
            "-q",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env={**os.environ, TINY_MODELS_ENV: str(tmp_path)},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    line = next((ln for ln in out.splitlines() if "ranks of one role differ" in ln), None)
    assert line is not None, out
    # Either worker may be the one the router lists first: the line names the field, both values and both.
    assert "role 'replica': max_running_requests is " in line, line
    assert {"is 4 on worker", "but 8 on worker"} <= _words(line) or {"is 8 on worker", "but 4 on worker"} <= _words(
        line
    ), line
    assert all(url in line for url in workers), line


def _words(line: str) -> set[str]:
    return {
        phrase
        for phrase in ("is 4 on worker", "but 8 on worker", "is 8 on worker", "but 4 on worker")
        if phrase in line
    }


@pytest.fixture(scope="module")
def slurm() -> Iterator[ClusterInfo]:
    with running_cluster() as info:
        yield info


def _slurm_deployment(folder: Path) -> Path:
    """tiny-cpu-replicas.toml with runner.launcher = "slurm", its relative paths made absolute."""
    text = REPLICAS.read_text().replace('device = "cpu"', 'device = "cpu"\nlauncher = "slurm"', 1)
    text = text.replace('"../', f'"{ROOT}/')
    path = folder / "tiny-cpu-replicas-slurm.toml"
    path.write_text(text)
    return path


def _sglang_servers(models: Path) -> list[psutil.Process]:
    """SGLang servers of the tiny models still running (a step's server runs under slurmstepd, not under us)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        line = " ".join(p.info["cmdline"] or ())
        if "sglang.launch_server" in line and str(models) in line:
            found.append(p)
    return found


def test_replicas_as_slurm_steps_are_measured_and_a_killed_step_ends_the_run(
    slurm: ClusterInfo, native: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python, models = native
    monkeypatch.setenv(TINY_MODELS_ENV, str(models))
    deployment = load(_slurm_deployment(tmp_path))
    variant = deployment.variant("plain.replica")
    lines: list[str] = []
    pre = PreflightSession(lambda: python, lines.append)
    options = LiveOptions(results_dir=tmp_path / "results", baselines_dir=tmp_path / "b", baseline_missing="skip")
    live = LiveSession(options, pre, lines.append)
    try:
        running = live.running(deployment, variant)
        routed = running.server
        assert isinstance(routed, RoutedServers) and routed.allocation is not None
        job = routed.allocation.job_id
        steps = routed.allocation.steps()
        assert sorted(s.name for s in steps) == [
            "tiny-cpu-replicas-slurm-plain-replica-0",
            "tiny-cpu-replicas-slurm-plain-replica-1",
        ], steps
        assert all(s.state == "RUNNING" for s in steps), steps
        record = live.measure(deployment, variant, deployment.workloads[0], 2)
        assert record.summary["decode_tok_s"].median > 0
        # One replica's server dies under slurmstepd: Slurm leaves the other step running; sglperf cancels the job.
        port = routed.workers[1].server.base_url.rsplit(":", 1)[1]
        victim = next(
            p
            for p in _sglang_servers(models)
            if f"--port {port}" in " ".join(p.cmdline()) and p.cmdline()[0] != "srun"  # the server, not its client
        )
        victim.kill()
        deadline = time.monotonic() + 120
        while routed.failure() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        failure = routed.failure()
        assert failure is not None and f"job {job}" in failure and "replica-1" in failure, failure
        print(failure)  # docs/scale-out.md quotes it
        with pytest.raises(server.ServerStartError) as raised:
            live.running(deployment, variant)
        assert str(raised.value) == failure and "\n" not in failure
    finally:
        live.close()
        pre.close()
    gone = time.monotonic() + 60
    while _sglang_servers(models) and time.monotonic() < gone:
        time.sleep(0.5)
    assert not _sglang_servers(models), [p.cmdline() for p in _sglang_servers(models)]
    listed = subprocess.run(["squeue", "-h", f"--jobs={job}"], capture_output=True, text=True, timeout=60)
    assert job not in listed.stdout
