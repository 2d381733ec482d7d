"""The Slurm launcher against a real single-node cluster (tests/support/slurm_cluster.py): servers run as the
steps of one allocation, and a step that dies takes the whole allocation down, whichever way it died.

Skipped, with the reason, where the cluster cannot run (Slurm not installed, not root).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from sglperf.runtime.server import free_port
from sglperf.runtime.slurm import SlurmAllocation, SlurmError, StepWatch, slurm_problem

from ..support.slurm_cluster import ClusterInfo, running_cluster

# Bounds for a slow machine, not measured ones: each is many times what it takes here.
ANSWER_WITHIN_S = 60.0
GONE_WITHIN_S = 60.0
GRANT_WITHIN_S = 30.0
SERVE = ("-m", "http.server")
SAY_ENV = "import os; print(os.environ['SGLPERF_MARK'], os.getcwd(), len(os.sched_getaffinity(0)))"


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterInfo]:
    with running_cluster() as info:
        yield info


@dataclass
class Server:
    name: str
    port: int
    client: subprocess.Popen[bytes]  # the srun client, on this side of Slurm
    log: Path


@dataclass
class Group:
    allocation: SlurmAllocation
    servers: dict[str, Server] = field(default_factory=dict)

    def launch(self, name: str, folder: Path) -> Server:
        port, log = free_port(), folder / f"{name}.log"
        with open(log, "wb") as out:
            client = subprocess.Popen(
                [*self.allocation.step_prefix(name), sys.executable, *SERVE, str(port), "--bind", "127.0.0.1"],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=folder,
            )
        self.servers[name] = server = Server(name, port, client, log)
        return server

    def watch(self) -> StepWatch:
        return StepWatch(self.allocation, {name: server.client.poll for name, server in self.servers.items()})


@contextlib.contextmanager
def server_group(tmp_path: Path, names: tuple[str, ...] = ("prefill", "decode")) -> Iterator[Group]:
    """Two http.server steps in an allocation of 2 tasks x 1 CPU, answering; all gone afterwards, whatever happens."""
    group = Group(SlurmAllocation.allocate("sglperf-test", len(names), 1, GRANT_WITHIN_S))
    try:
        for name in names:
            group.launch(name, tmp_path)
        for server in group.servers.values():
            _wait_answering(server)
        yield group
    finally:
        group.allocation.cancel_quietly("test teardown")
        for server in group.servers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.client.wait(GONE_WITHIN_S)
            if server.client.poll() is None:
                server.client.kill()
                server.client.wait()
            for proc in _server_processes(server.port):
                proc.kill()


def _wait_answering(server: Server) -> None:
    deadline = time.monotonic() + ANSWER_WITHIN_S
    while time.monotonic() < deadline:
        if server.client.poll() is not None:
            pytest.fail(f"step {server.name} ended before answering: {server.log.read_text(errors='replace')}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{server.port}/", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    pytest.fail(f"step {server.name} did not answer on port {server.port} within {ANSWER_WITHIN_S:g} s")


def _server_processes(port: int) -> list[psutil.Process]:
    """The http.server processes serving ``port``, whoever started them (not the srun clients that ask for them)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if not cmdline or Path(cmdline[0]).name == "srun" or "http.server" not in cmdline or str(port) not in cmdline:
            continue
        with contextlib.suppress(psutil.NoSuchProcess):
            if proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def _the_step_task(server: Server) -> psutil.Process:
    (task,) = _server_processes(server.port)
    # The server as Slurm runs it: a child of the step's slurmstepd, not of this test's srun client.
    parent = task.parent()
    assert parent is not None and parent.name() == "slurmstepd"
    return task


def _wait_gone(port: int) -> list[psutil.Process]:
    deadline = time.monotonic() + GONE_WITHIN_S
    while (left := _server_processes(port)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _listed(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", f"--jobs={job_id}"], capture_output=True, text=True, timeout=60).stdout


def _assert_all_gone(group: Group) -> None:
    assert _listed(group.allocation.job_id) == ""
    assert not group.allocation.alive() and group.allocation.steps() == []
    for server in group.servers.values():
        assert _wait_gone(server.port) == [], f"step {server.name}'s server outlived its job"
        assert server.client.wait(GONE_WITHIN_S) is not None


def test_a_killed_server_takes_its_whole_allocation_down(cluster: ClusterInfo, tmp_path: Path) -> None:
    with server_group(tmp_path) as group:
        watch = group.watch()
        try:
            _the_step_task(group.servers["prefill"]).kill()
            assert watch.wait(GONE_WITHIN_S), "the watch did not see the step end"
        finally:
            watch.stop()
        job = group.allocation.job_id
        assert watch.failure is not None
        assert watch.failure.startswith(f"slurm step prefill of job {job} ended (")
        assert watch.failure.endswith(f": cancelled job {job}, every step of it")
        _assert_all_gone(group)


def test_a_killed_srun_client_takes_its_whole_allocation_down(cluster: ClusterInfo, tmp_path: Path) -> None:
    # Slurm alone would leave the step running: its srun client's death ends nothing (seen with 22.05).
    with server_group(tmp_path) as group:
        watch = group.watch()
        try:
            group.servers["decode"].client.send_signal(signal.SIGKILL)
            assert watch.wait(GONE_WITHIN_S), "the watch did not see the srun client end"
        finally:
            watch.stop()
        job = group.allocation.job_id
        assert watch.failure == (
            f"slurm step decode of job {job} ended (its srun killed by SIGKILL): cancelled job {job}, every step of it"
        )
        _assert_all_gone(group)


def test_cancel_at_a_normal_teardown_leaves_nothing(cluster: ClusterInfo, tmp_path: Path) -> None:
    with server_group(tmp_path) as group:
        job = group.allocation.job_id
        assert group.allocation.alive()
        steps = group.allocation.steps()
        assert sorted((step.name, step.state) for step in steps) == [("decode", "RUNNING"), ("prefill", "RUNNING")]
        assert {step.step_id.split(".")[0] for step in steps} == {job}
        watch = group.watch()
        watch.stop()
        group.allocation.cancel("teardown")
        group.allocation.cancel()  # a second call, as a teardown after a failure makes: quiet
        assert watch.failure is None
        watch.check()
        _assert_all_gone(group)


def test_a_step_has_srun_s_environment_and_working_directory(
    cluster: ClusterInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    allocation = SlurmAllocation.allocate("sglperf-test-env", 1, 1, GRANT_WITHIN_S)
    try:
        done = subprocess.run(
            [*allocation.step_prefix("env"), sys.executable, "-c", SAY_ENV],
            cwd=tmp_path,
            env={**os.environ, "SGLPERF_MARK": "marked"},
            capture_output=True,
            text=True,
            timeout=ANSWER_WITHIN_S,
        )
    finally:
        allocation.cancel()
    assert done.returncode == 0, done.stderr
    mark, cwd, cpus = done.stdout.split()
    assert (mark, cwd) == ("marked", str(tmp_path))
    if cluster.cgroups:
        assert cpus == "1"  # the step's own CPU, not the machine's


def test_no_grant_within_the_timeout_is_one_line_and_queues_nothing(cluster: ClusterInfo) -> None:
    holder = SlurmAllocation.allocate("sglperf-test-holder", cluster.cpus, 1, GRANT_WITHIN_S)
    try:
        with pytest.raises(SlurmError) as exc:
            SlurmAllocation.allocate("sglperf-test-late", 1, 1, 1)
        assert str(exc.value).startswith(
            "Slurm did not grant job 'sglperf-test-late' (1 task(s) x 1 CPU(s)) within 1 s"
        )
        names = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True, timeout=60).stdout
        assert names.split() == ["sglperf-test-holder"]
    finally:
        holder.cancel()


def test_no_controller_is_one_line(cluster: ClusterInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The cluster's own configuration, with the controller's port one nobody listens on.
    text = cluster.conf.read_text().replace(f"SlurmctldPort={cluster.controller_port}", f"SlurmctldPort={free_port()}")
    (tmp_path / "slurm.conf").write_text(text)
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    problem = slurm_problem()
    assert problem is not None and "\n" not in problem and "slurmctld" in problem
    with pytest.raises(SlurmError) as exc:
        SlurmAllocation.allocate("sglperf-test-nowhere", 1, 1, 1)
    assert str(exc.value).startswith("salloc could not reach the Slurm controller for job 'sglperf-test-nowhere'")


def test_the_slurm_commands_find_the_cluster(cluster: ClusterInfo) -> None:
    assert os.environ["SLURM_CONF"] == str(cluster.conf) == cluster.env["SLURM_CONF"]
    assert slurm_problem() is None
