"""A real single-node Slurm cluster for tests, started and stopped by the tests themselves.

Uses the machine's Slurm and MUNGE (Debian's slurm-wlm, slurm-client and munge; ci/slurm.sh installs them
where it can). Nothing outside a private folder under /tmp is written: the configuration (``SLURM_CONF``
points at it while the cluster runs; /etc/slurm is not touched), the state, spool, log and pid files, and a
munged of its own with its own key and socket, so that a munged or Slurm of the machine is left alone. The
folder is short on purpose: munged's and slurmstepd's Unix sockets live in it, and pytest's temporary
folders are long. Root only: slurmd starts each step as the user who asked for it, which needs root.

One such cluster per machine at a time: slurmd takes the host's own node name, and with cgroups the
cgroup folders named after it. A lock file makes other sessions and pytest-xdist workers wait their turn.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from sglperf.runtime.server import free_port

LOCK_PATH = Path(tempfile.gettempdir()) / "sglperf-slurm-cluster.lock"
LOCK_WAIT_S = 900.0
START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 30.0
COMMAND_TIMEOUT_S = 60.0
CLIENTS = ("salloc", "srun", "scancel", "squeue", "sinfo", "scontrol")
DAEMONS = ("slurmctld", "slurmd", "munged")
CGROUP_ROOT = Path("/sys/fs/cgroup")

CGROUP_PLUGINS = "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup,task/affinity\n"
# Seen to work on the same machines as the cgroup plugins; used where those fail (no cgroup delegation).
PLAIN_PLUGINS = "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
CGROUP_CONF = """\
CgroupPlugin=autodetect
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=yes
ConstrainRAMSpace=no
ConstrainDevices=no
"""


@dataclass(frozen=True)
class ClusterInfo:
    folder: Path
    conf: Path  # SLURM_CONF while the cluster runs
    node: str
    cpus: int
    controller_port: int
    node_port: int
    cgroups: bool  # proctrack/cgroup + task/cgroup; False: proctrack/linuxproc + task/none

    @property
    def env(self) -> dict[str, str]:
        """What a process outside this one needs in its environment to use the cluster."""
        return {"SLURM_CONF": str(self.conf)}


class _CannotRun(Exception):
    """Becomes the pytest skip: one line saying why."""


def _tool(name: str) -> str | None:
    # Daemons live in /usr/sbin, often not on a test runner's PATH.
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    return shutil.which(name, path=path)


def cannot_run() -> str | None:
    """Why no test cluster can run here, in one line; None when it can."""
    missing = [name for name in (*CLIENTS, *DAEMONS) if _tool(name) is None]
    if missing:
        return f"Slurm or MUNGE is not installed ({', '.join(missing)} not found): `ci/slurm.sh install` as root"
    if os.geteuid() != 0:
        return "the single-node Slurm test cluster needs root (slurmd starts steps as their user)"
    return None


def _foreign_daemons() -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "name"]):
        if proc.info["name"] in ("slurmctld", "slurmd"):
            found.append(f"{proc.info['name']} (pid {proc.info['pid']})")
    return found


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    with open(LOCK_PATH, "a+") as fh:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise _CannotRun(
                        f"another test session held the Slurm test cluster (lock {LOCK_PATH}) for {LOCK_WAIT_S:g} s"
                    ) from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _node_hardware() -> tuple[str, int, str]:
    """Node name, CPUs and the topology fields of the node line, from what slurmd finds (`slurmd -C`)."""
    done = subprocess.run([str(_tool("slurmd")), "-C"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    fields = dict(item.split("=", 1) for item in done.stdout.split() if "=" in item)
    if done.returncode != 0 or "NodeName" not in fields:
        raise _CannotRun(f"`slurmd -C` did not describe this node: {_last_line(done.stderr + done.stdout)}")
    sockets = int(fields.get("Boards", "1")) * int(fields.get("SocketsPerBoard", "1"))
    cores, threads = int(fields.get("CoresPerSocket", "1")), int(fields.get("ThreadsPerCore", "1"))
    cpus = os.cpu_count() or 1
    if cpus != sockets * cores * threads:
        # Slurm refuses a node line whose CPUs disagree with its topology; slurmd's count is the one it checks.
        cpus = int(fields.get("CPUs", sockets * cores * threads))
    topology = f"Sockets={sockets} CoresPerSocket={cores} ThreadsPerCore={threads}"
    return fields["NodeName"], cpus, topology


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[-1]


def _slurm_conf(folder: Path, node: str, cpus: int, topology: str, ports: tuple[int, int], cgroups: bool) -> str:
    return f"""\
# A single-node test cluster of sglperf's tests (tests/support/slurm_cluster.py); removed with its folder.
ClusterName=sglperftest
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder}/munge/munge.socket
CredType=cred/munge
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/run/slurmctld.pid
SlurmdPidFile={folder}/run/slurmd.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
{CGROUP_PLUGINS if cgroups else PLAIN_PLUGINS}SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
KillWait=5
InactiveLimit=0
MinJobAge=30
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} {topology} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""


def _pid_in(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _end(pids: list[int], deadline_s: float = STOP_DEADLINE_S) -> None:
    """Wait for ``pids`` to exit, then SIGKILL whichever still runs."""
    deadline = time.monotonic() + deadline_s
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _slurmstepds() -> set[int]:
    return {proc.pid for proc in psutil.process_iter(["name"]) if proc.info["name"] == "slurmstepd"}


def _slurm_cgroups(node: str) -> set[Path]:
    return {path for path in CGROUP_ROOT.glob(f"*/slurm_{node}") if path.is_dir()}


def _remove_cgroups(paths: set[Path]) -> None:
    """Remove the (empty by now) cgroup folders slurmd made, deepest first: rmdir is how cgroups go."""
    for top in paths:
        for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                folder.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


class _Cluster:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.conf = folder / "slurm.conf"
        self.munged_pid: int | None = None
        self.started_daemons = False

    def run(self, *argv: str, timeout_s: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        # SLURM_CONF passed on explicitly: the teardown runs after os.environ has its own value back.
        return subprocess.run(
            [str(_tool(argv[0]) or argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "SLURM_CONF": str(self.conf)},
        )

    def start_munged(self) -> None:
        munge = self.folder / "munge"
        # munged wants its socket folder searchable by everyone, and its key private.
        munge.mkdir(mode=0o755)
        munge.chmod(0o755)
        key = munge / "munge.key"
        key.touch(mode=0o600)
        key.write_bytes(os.urandom(1024))
        done = self.run(
            "munged",
            f"--socket={munge}/munge.socket",
            f"--key-file={key}",
            f"--log-file={munge}/munged.log",
            f"--pid-file={munge}/munged.pid",
            f"--seed-file={munge}/munged.seed",
        )
        self.munged_pid = _pid_in(munge / "munged.pid")
        if done.returncode != 0 or self.munged_pid is None:
            raise _CannotRun(f"munged did not start: {_last_line(done.stderr + done.stdout)}")

    def start_slurm(self, node: str, cpus: int, topology: str, cgroups: bool) -> ClusterInfo:
        for name in ("state", "spool", "log", "run"):
            shutil.rmtree(self.folder / name, ignore_errors=True)
            (self.folder / name).mkdir()
        ports = (free_port(), free_port())
        self.conf.write_text(_slurm_conf(self.folder, node, cpus, topology, ports, cgroups))
        cgroup_conf = self.folder / "cgroup.conf"
        if cgroups:
            cgroup_conf.write_text(CGROUP_CONF)
        else:
            cgroup_conf.unlink(missing_ok=True)
        self.started_daemons = True
        for daemon in ("slurmctld", "slurmd"):
            done = self.run(daemon, "-f", str(self.conf))
            if done.returncode != 0:
                raise _CannotRun(f"{daemon} did not start: {self.why(daemon, done.stderr + done.stdout)}")
        deadline = time.monotonic() + START_DEADLINE_S
        state = ""
        while state != "idle":
            if time.monotonic() > deadline:
                raise _CannotRun(
                    f"node {node} was not idle {START_DEADLINE_S:g} s after slurmd started (state {state!r}): "
                    + self.why("slurmd", "")
                )
            time.sleep(0.1)
            state = self.run("sinfo", "-h", "-n", node, "-o", "%T").stdout.strip()
        # A step is what the tests need: the plugins only show whether they work when one runs.
        done = self.run("srun", "-n1", "-c1", "true")
        if done.returncode != 0:
            raise _CannotRun(f"a first step (`srun -n1 true`) failed: {self.why('slurmd', done.stderr + done.stdout)}")
        return ClusterInfo(self.folder, self.conf, node, cpus, ports[0], ports[1], cgroups)

    def why(self, daemon: str, output: str) -> str:
        log = self.folder / "log" / f"{daemon}.log"
        text = output + (log.read_text(errors="replace") if log.exists() else "")
        return _last_line(text)

    def stop_slurm(self) -> None:
        if not self.started_daemons:
            return
        pids = [pid for name in ("slurmctld", "slurmd") if (pid := _pid_in(self.folder / "run" / f"{name}.pid"))]
        with contextlib.suppress(subprocess.TimeoutExpired):
            # Every job first: slurmd's shutdown leaves running steps (and their slurmstepd) behind.
            jobs = self.run("squeue", "-h", "-o", "%i", timeout_s=STOP_DEADLINE_S).stdout.split()
            if jobs:
                self.run("scancel", *jobs, timeout_s=STOP_DEADLINE_S)
                deadline = time.monotonic() + STOP_DEADLINE_S
                while time.monotonic() < deadline and self.run("squeue", "-h", "-o", "%i").stdout.strip():
                    time.sleep(0.2)
            self.run("scontrol", "shutdown", timeout_s=STOP_DEADLINE_S)
        _end(pids)
        self.started_daemons = False

    def stop_munged(self) -> None:
        if self.munged_pid is not None and _running(self.munged_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.munged_pid, signal.SIGTERM)
            _end([self.munged_pid])


@contextlib.contextmanager
def running_cluster(tmp_dir: Path | None = None) -> Iterator[ClusterInfo]:
    """A single-node Slurm cluster with ``SLURM_CONF`` pointing at it in ``os.environ``, for the ``with`` block.

    ``tmp_dir``: the private folder (kept afterwards; it must be short, for the Unix sockets in it); by
    default a new one under /tmp, removed afterwards. Skips the test, with one line saying why, where no
    cluster can run: Slurm or MUNGE not installed, not root, a daemon that does not start.
    """
    try:
        with _cluster(tmp_dir) as info:
            yield info
    except _CannotRun as exc:
        pytest.skip(f"no Slurm test cluster: {exc}")


@contextlib.contextmanager
def _cluster(tmp_dir: Path | None) -> Iterator[ClusterInfo]:
    problem = cannot_run()
    if problem:
        raise _CannotRun(problem)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_machine_lock())
        foreign = _foreign_daemons()
        if foreign:
            raise _CannotRun(f"Slurm daemons not started by these tests run here ({', '.join(foreign)})")
        if tmp_dir is None:
            folder = Path(tempfile.mkdtemp(prefix="sglperf-slurm-"))
            stack.callback(shutil.rmtree, folder, ignore_errors=True)
        else:
            folder = tmp_dir
            folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o755)
        node, cpus, topology = _node_hardware()
        stepds_before, cgroups_before = _slurmstepds(), _slurm_cgroups(node)
        cluster = _Cluster(folder)
        stack.callback(cluster.stop_munged)
        # Registered before the daemons start: whatever starts is stopped, whichever way the block ends.
        stack.callback(lambda: _remove_cgroups(_slurm_cgroups(node) - cgroups_before))
        stack.callback(lambda: _end(list(_slurmstepds() - stepds_before), 0.0))
        stack.callback(cluster.stop_slurm)
        previous = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(cluster.conf)
        stack.callback(_restore_env, "SLURM_CONF", previous)
        cluster.start_munged()
        try:
            info = cluster.start_slurm(node, cpus, topology, cgroups=True)
        except _CannotRun as with_cgroups:
            cluster.stop_slurm()
            try:
                info = cluster.start_slurm(node, cpus, topology, cgroups=False)
            except _CannotRun as without:
                raise _CannotRun(f"with cgroups: {with_cgroups}; without: {without}") from None
        yield info


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
