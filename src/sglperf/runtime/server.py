"""Server lifecycle: launch one SGLang (or emulator) process, wait until healthy, tear the tree down.

Where suites like this rot: servers that never become healthy, zombie workers holding GPU memory, a
crash that hangs the run. So: every wait has a deadline and reports progress; a process that exits
during startup fails at once with its log's tail; teardown kills the whole process tree (the
launcher first, then SIGTERM, then SIGKILL) and is registered for interpreter exit, and the direct
child is told by the kernel to die with its parent (PR_SET_PDEATHSIG) in case pytest itself is killed.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from sglperf.errors import SglperfError
from sglperf.model.process_exit import describe_exit
from sglperf.model.progress import Progress, silent
from sglperf.runtime import server_ledger
from sglperf.runtime.http_deadline import Reply, get_within
from sglperf.sglang.flags import API_KEY_FLAG, HOST_FLAG, PORT_FLAG
from sglperf.sglang.server_api import HEALTH_PATHS, LAUNCH_MODULE

HOST = "127.0.0.1"
PROGRESS_EVERY_S = 30.0
POLL_S = 0.25
HEALTH_ATTEMPT_S = 10.0  # one health request, wall time
LEDGER_EVERY_S = 2.0  # how often a starting server's /dev/shm files and processes are written down (server_ledger)
# A string, not an import: production code never imports the test double.
EMULATOR_MODULE = "sglperf.testing.emulator"


class ServerStartError(SglperfError, RuntimeError):
    """The server exited or missed its deadline during startup; the message carries the log's tail."""


@dataclass(frozen=True)
class ServerSpec:
    name: str
    python: str
    argv: tuple[str, ...]  # SGLang's argv without host, port and API key
    env: Mapping[str, str] = field(default_factory=dict)
    log_path: Path = Path("server.log")
    startup_timeout_s: float = 1800.0
    api_key: str | None = None
    emulated: bool = False
    launch_module: str | None = None  # another server than SGLang's or the emulator (SGLang's router)
    health_paths: tuple[str, ...] = HEALTH_PATHS  # the first answering 404 gives way to the next
    # What runs the command (a Slurm step's srun, sglperf.runtime.slurm); empty: a child of this process.
    prefix: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.launch_module or (EMULATOR_MODULE if self.emulated else LAUNCH_MODULE)


@dataclass(frozen=True)
class StopReport:
    pids: tuple[int, ...]
    killed: tuple[int, ...]  # needed SIGKILL
    survivors: tuple[int, ...]  # still alive after SIGKILL (should never happen)
    seconds: float


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it if the process that launched it dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_LIVE: set[Server] = set()
_LIVE_LOCK = threading.Lock()


def stop_all() -> None:
    """Stop every server this process started (interpreter exit, SIGTERM to pytest)."""
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        server.stop()


atexit.register(stop_all)


class Server:
    """One running server process (and its children)."""

    def __init__(self, spec: ServerSpec, cuda_visible_devices: str | None = None):
        self.spec = spec
        self.port = free_port()
        self.base_url = f"http://{HOST}:{self.port}"
        argv = [*spec.argv, HOST_FLAG, HOST, PORT_FLAG, str(self.port)]
        if spec.api_key:
            argv += [API_KEY_FLAG, spec.api_key]
        self.command = (*spec.prefix, spec.python, "-m", spec.module, *argv)
        env = {**os.environ, **spec.env}
        if cuda_visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
        _start_fresh_log(spec.log_path)
        self._log = open(spec.log_path, "ab")  # noqa: SIM115  # closed in stop()
        self._log.write(
            f"# sglperf: started at {time.time():.3f} CUDA_VISIBLE_DEVICES="
            f"{cuda_visible_devices}: {' '.join(self.command)}\n".encode()
        )
        self._log.flush()
        self.proc = subprocess.Popen(
            self.command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509  # one prctl call, no locks taken
        )
        self.started_at = time.monotonic()
        self._stopped: StopReport | None = None
        self._ledger: server_ledger.LedgerEntry | None = None
        # Every process of the tree seen so far (pid -> start time): one that leaves the session and
        # whose parent dies is in neither the tree nor the group at stop(), but it was seen here.
        self._seen: dict[int, float] = {}
        with _LIVE_LOCK:
            _LIVE.add(self)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.spec.api_key}"} if self.spec.api_key else {}

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.spec.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def last_log_line(self) -> str:
        tail = self.log_tail(5).splitlines()
        return tail[-1][:200] if tail else "(no output yet)"

    def wait_healthy(self, progress: Progress = silent) -> float:
        """Block until a health endpoint answers 200; returns the startup time in seconds."""
        deadline = self.started_at + self.spec.startup_timeout_s
        last_progress = last_ledger = self.started_at
        paths = list(self.spec.health_paths)
        last_answer = "nothing answered yet"
        while True:
            self._remember(_tree(self.proc.pid))
            code = self.proc.poll()
            if code is not None:
                self.stop()
                raise ServerStartError(
                    f"{self.spec.name}: server {describe_exit(code)} during startup after "
                    f"{time.monotonic() - self.started_at:.1f} s ({' '.join(self.command)}); "
                    f"log {self.spec.log_path} ends with:\n{self.log_tail()}"
                )
            try:
                # A wall-clock bound per attempt, never past the start-up deadline: a server that
                # drips bytes cannot hold the loop (http_deadline).
                attempt_s = min(HEALTH_ATTEMPT_S, max(0.0, deadline - time.monotonic()) + 1.0)
                response = get_within(self.base_url + paths[0], attempt_s, self.headers)
                if response.status_code == 404 and len(paths) > 1:
                    paths.pop(0)  # releases without /health_generate
                elif response.status_code == 200:
                    self.write_down()  # before anyone hears "healthy" and may kill us
                    return time.monotonic() - self.started_at
                last_answer = f"{paths[0]} last answered {_describe_response(response)}"
            except httpx.HTTPError as exc:  # not listening yet, or no answer in time
                if last_answer.startswith("nothing answered"):
                    last_answer = f"nothing answered yet ({type(exc).__name__}: {exc})"[:300]
                # Refused: nothing listens on the port yet. Anything else may be another socket holding it
                # (it accepts, never answers): only then is the log read for the server's bind failure.
                taken = None if isinstance(exc, httpx.ConnectError) else port_taken_line(self.log_tail(), self.port)
                if taken:
                    self.stop()
                    raise ServerStartError(
                        f"{self.spec.name}: could not bind its HTTP port {self.port}, another socket holds it "
                        f"(it stays up serving nothing, so it was stopped now; start it again): {taken}; "
                        f"log {self.spec.log_path}"
                    ) from None
            now = time.monotonic()
            if now - last_ledger >= LEDGER_EVERY_S:
                self.write_down()
                last_ledger = now
            if now > deadline:
                self.stop()
                raise ServerStartError(
                    f"{self.spec.name}: not healthy within {self.spec.startup_timeout_s:.0f} s "
                    f"(deployment launch.startup_timeout_s); {last_answer}; "
                    f"log {self.spec.log_path} ends with:\n{self.log_tail()}"
                )
            if now - last_progress >= PROGRESS_EVERY_S:
                progress(
                    f"{self.spec.name}: starting for {now - self.started_at:.0f} s; "
                    f"last log line: {self.last_log_line()}"
                )
                last_progress = now
            time.sleep(POLL_S)

    def pids(self) -> list[int]:
        try:
            root = psutil.Process(self.proc.pid)
            return [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.NoSuchProcess:
            return []

    def _remember(self, procs: list[psutil.Process]) -> None:
        for p in procs:
            with contextlib.suppress(psutil.Error):
                self._seen.setdefault(p.pid, p.create_time())

    def _seen_alive(self, known: set[int]) -> list[psutil.Process]:
        """Processes seen in the tree earlier that still run (the same process: same start time)."""
        alive = []
        for pid, created in self._seen.items():
            if pid in known:
                continue
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if p.create_time() == created:
                    alive.append(p)
        return alive

    def write_down(self) -> None:
        """What the server maps in /dev/shm and the processes seen in its tree, in the ledger, in case
        this process is killed before stop(); rewritten only when something new was seen."""
        known = set(self._ledger.paths) if self._ledger else set()
        known_pids = {pid for pid, _ in self._ledger.descendants} if self._ledger else set()
        procs = _tree(self.proc.pid)
        self._remember(procs)
        mapped = _shared_memory_files(procs)
        if not mapped <= known or not self._seen.keys() - {self.proc.pid} <= known_pids:
            entry = server_ledger.record(self.proc.pid, self.spec.name, mapped | known, self._seen)
            self._ledger = entry or self._ledger

    def stop(self, grace_s: float = 15.0) -> StopReport:
        """SIGTERM the whole tree, SIGKILL what is left after ``grace_s``; idempotent."""
        if self._stopped is not None:
            return self._stopped
        started = time.monotonic()
        procs = _tree(self.proc.pid)
        procs += self._seen_alive({p.pid for p in procs})
        pids = tuple(p.pid for p in procs)
        shared = _shared_memory_files(procs)
        if len(procs) > 1 and procs[0].pid == self.proc.pid:
            # The launcher first, and at once: SGLang's launcher reads a child stopped by our SIGTERM as a
            # crash, sleeps 5 s "to let GPU activity settle" and runs crash diagnostics (0.5.23), and its
            # own SIGTERM path drains for about 6 s; each stop took 7-8 s, now about 2. Killed, it watches
            # nothing, and its scheduler and detokenizer stop on SIGTERM.
            with contextlib.suppress(psutil.Error):
                procs[0].kill()
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        killed = tuple(p.pid for p in alive)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        _, survivors = psutil.wait_procs(alive, timeout=5.0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1.0)  # reap our direct child
        removed = _remove_files(shared | set(self._ledger.paths if self._ledger else ()))
        server_ledger.forget(self._ledger)
        if removed:
            self._log.write(f"# sglperf: removed shared memory it left: {', '.join(removed)}\n".encode())
        self._log.write(f"# sglperf: stopped at {time.time():.3f}\n".encode())
        self._log.close()
        self._stopped = StopReport(pids, killed, tuple(p.pid for p in survivors), time.monotonic() - started)
        with _LIVE_LOCK:
            _LIVE.discard(self)
        return self._stopped


def port_taken_line(log_tail: str, port: int) -> str | None:
    """The server's own line saying it could not bind ``port``, e.g. uvicorn's "[Errno 98] error while
    attempting to bind on address ('127.0.0.1', 36781): address already in use". Seen on SGLang 0.5.20 on
    the CPU: the port sglperf chose was taken between its choice and the bind (by one of SGLang's own
    sockets: something there accepted connections but never answered HTTP), and the server stayed up,
    serving nothing, until the start-up deadline."""
    for line in reversed(log_tail.splitlines()):
        if "address already in use" in line and f", {port})" in line:
            return line.strip()[:300]
    return None


def _describe_response(response: Reply, limit: int = 200) -> str:
    """`500: {"error": ...}`: the status code and the start of the body, on one line."""
    body = " ".join(response.text.split())
    if not body:
        return f"{response.status_code} (empty body)"
    return f"{response.status_code}: {body[:limit]}{'...' if len(body) > limit else ''}"


def _start_fresh_log(path: Path) -> None:
    """Each server start writes a log of its own, so "log ends with" is this start's; the previous log
    (an earlier run in a reused --results-dir) is kept as `<name>.1`, replacing an older `.1`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        os.replace(path, path.with_name(path.name + ".1"))


def _shared_memory_files(procs: Sequence[psutil.Process]) -> set[str]:
    """Files in /dev/shm the server's processes have mapped: theirs. SGLang's CPU backend leaves a
    270 MB `deepspeed_allreduce_buffer_*` there per start; on RAM-backed /dev/shm, enough of them
    starve the next servers ("Loaded weights leave no ... memory for the KV cache")."""
    found: set[str] = set()
    for p in procs:
        found |= server_ledger.mapped_files(p.pid)
    return found


def _remove_files(paths: set[str]) -> list[str]:
    removed = []
    for path in sorted(paths):
        with contextlib.suppress(FileNotFoundError, PermissionError):
            os.unlink(path)
            removed.append(path)
    return removed


def _tree(pid: int) -> list[psutil.Process]:
    """The server's process tree and its process group (the launcher leads a session of its own, so
    its pid is the group's id, even once it has died)."""
    procs = []
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    # Children that left the session are still found through the tree; the group catches the rest
    # (e.g. a grandchild re-parented to init after its parent died); `Server._seen` what left both.
    known = {q.pid for q in procs}
    for p in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if p.pid not in known and os.getpgid(p.pid) == pid:
                procs.append(p)
    return procs


def launch(spec: ServerSpec, cuda_visible_devices: str | None = None, progress: Progress = silent) -> Server:
    """Start a server and wait for it to become healthy (or raise ServerStartError).

    First, shared memory that servers killed with an earlier run left is removed (`server_ledger`);
    what this one maps there is written down as it starts, for the same reason."""
    server_ledger.sweep(progress)
    server = Server(spec, cuda_visible_devices)
    progress(f"{spec.name}: starting {' '.join(server.command)} (log {spec.log_path})")
    seconds = server.wait_healthy(progress)
    progress(f"{spec.name}: healthy after {seconds:.1f} s at {server.base_url}")
    return server


def our_processes(markers: Sequence[str] = (LAUNCH_MODULE, EMULATOR_MODULE)) -> list[psutil.Process]:
    """Processes descended from this one that run a server module (for leak checks)."""
    found = []
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if any(m in " ".join(p.cmdline()) for m in markers):
                    found.append(p)
    return found
