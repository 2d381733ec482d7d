"""Server lifecycle against the emulator: health wait, deadlines, crashes, teardown of the whole tree."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import psutil
import pytest

from sglperf.runtime import server, server_ledger
from sglperf.runtime.server import ServerSpec, ServerStartError, launch
from sglperf.testing.emulator.console import READY_LINE

from ..support.project import ROOT

ARGV = ("--model-path", "/nonexistent", "--tp-size", "2")


def spec(tmp_path: Path, timeout: float = 20.0, **config: object) -> ServerSpec:
    return ServerSpec(
        name="emu",
        python=sys.executable,
        argv=ARGV,
        log_path=tmp_path / "emu.log",
        startup_timeout_s=timeout,
        emulated=True,
        env={"SGLPERF_EMULATOR_CONFIG": json.dumps({"startup_s": 0.2, **config})},
    )


def alive(pids: Iterable[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_launch_health_and_teardown(tmp_path: Path) -> None:
    messages: list[str] = []
    s = launch(spec(tmp_path), progress=messages.append)
    try:
        assert s.base_url.startswith("http://127.0.0.1:")
        assert any("healthy after" in m for m in messages)
        assert "TEST DOUBLE" in (tmp_path / "emu.log").read_text()
        pids = s.pids()
    finally:
        report = s.stop()
    assert report.survivors == () and not alive(pids)
    assert s.stop() is report  # idempotent


def test_exit_during_startup_fails_fast_with_log_tail(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(ServerStartError) as excinfo:
        launch(spec(tmp_path, startup_s=2.0, exit_during_startup=3))
    message = str(excinfo.value)
    assert "exited with code 3 during startup" in message and "TEST DOUBLE" in message
    assert time.monotonic() - started < 10
    assert not server.our_processes()


def test_a_server_killed_by_a_signal_says_which_and_why(tmp_path: Path) -> None:
    """A native module with an instruction this CPU lacks kills the server before Python can say anything."""
    with pytest.raises(ServerStartError) as excinfo:
        launch(spec(tmp_path, startup_s=1.0, exit_during_startup=-int(signal.SIGILL)))
    message = str(excinfo.value)
    assert "server killed by SIGILL (Illegal instruction): likely a native module uses instructions this CPU lacks" in (
        message
    )
    assert not server.our_processes()


def test_never_healthy_hits_the_deadline_with_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "PROGRESS_EVERY_S", 0.5)
    messages: list[str] = []
    started = time.monotonic()
    with pytest.raises(ServerStartError, match=r"not healthy within 2 s \(deployment launch.startup_timeout_s\)"):
        launch(spec(tmp_path, timeout=2.0, never_healthy=True), progress=messages.append)
    assert 2.0 <= time.monotonic() - started < 8
    assert any("starting for" in m and "last log line" in m for m in messages)
    assert not server.our_processes()


def test_teardown_escalates_to_sigkill_for_a_process_ignoring_sigterm(tmp_path: Path) -> None:
    stubborn = tmp_path / "stubborn.py"
    ready = tmp_path / "ready"
    stubborn.write_text(
        textwrap.dedent(f"""
        import pathlib, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ignore = "import pathlib, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        ignore += "pathlib.Path({str(ready)!r}).touch(); time.sleep(600)"
        child = subprocess.Popen([sys.executable, "-c", ignore])
        time.sleep(600)
    """)
    )
    # A Server whose process is the stubborn script (the module does not matter for teardown).
    s = server.Server(ServerSpec(name="stubborn", python=sys.executable, argv=(), log_path=tmp_path / "s.log"))
    s.proc.kill()
    s.proc.wait()
    s.proc = subprocess.Popen([sys.executable, str(stubborn)], start_new_session=True)
    deadline = time.monotonic() + 60  # both interpreters started and ignoring SIGTERM: seconds on a busy host
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = s.pids()
    assert len(pids) == 2
    report = s.stop(grace_s=1.0)
    # A process with children is killed at once (SGLang's launcher: see Server.stop); its child, ignoring
    # SIGTERM, needed SIGKILL after the grace period.
    assert report.killed == tuple(p for p in pids if p != s.proc.pid) and report.survivors == ()
    assert not alive(pids)


def test_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    """pytest (or an xdist worker) killed with SIGKILL must not leave its server behind."""
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(f"""
        import json, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from sglperf.runtime.server import ServerSpec, launch
        s = launch(ServerSpec(name="orphan", python=sys.executable, argv=("--model-path", "/x"),
                   log_path=Path({str(tmp_path / "o.log")!r}), emulated=True,
                   env={{"SGLPERF_EMULATOR_CONFIG": json.dumps({{"startup_s": 0.1}})}}))
        print(s.proc.pid, flush=True)
        time.sleep(600)
    """)
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    try:
        child = int(parent.stdout.readline())
        assert psutil.pid_exists(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 60
        while alive([child]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive([child])
    finally:
        parent.kill()


def _ledger_entries() -> list[server_ledger.LedgerEntry]:
    return [server_ledger.read_entry(f) for f in server_ledger.entry_files()]


def _emulator_buffers(pid: int) -> set[str]:
    return {p for p in server_ledger.mapped_files(pid) if "sglperf_emulator_buffer" in p}


@pytest.fixture
def own_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A ledger of this test's own, and no buffer of this test's servers left in /dev/shm whatever happens.

    Only what this ledger recorded is removed: a test on another pytest-xdist worker may be holding a
    buffer of its own there at the same moment."""
    home = tmp_path / "home"
    monkeypatch.setenv("SGLPERF_HOME", str(home))
    yield home
    for file in server_ledger.entry_files():
        with contextlib.suppress(server_ledger.LedgerError):
            for path in server_ledger.read_entry(file).paths:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


@pytest.mark.skipif(not os.path.isdir(server_ledger.SHARED_MEMORY_DIR), reason="no /dev/shm here")
def test_shared_memory_is_written_down_before_healthy_is_announced(tmp_path: Path, own_ledger: Path) -> None:
    """What failed CI: pytest SIGKILLed as soon as "healthy after" was printed, before the ledger was
    written, left SGLang's 270 MB buffer behind for good."""
    seen_at_healthy: list[list[server_ledger.LedgerEntry]] = []

    def progress(message: str) -> None:
        if "healthy after" in message:
            seen_at_healthy.append(_ledger_entries())

    s = launch(spec(tmp_path, startup_s=0.1, shared_memory_bytes=1 << 20), progress=progress)
    try:
        buffers = _emulator_buffers(s.proc.pid)
        assert len(buffers) == 1
        assert [[(e.pid, e.paths) for e in entries] for entries in seen_at_healthy] == [[(s.proc.pid, tuple(buffers))]]
    finally:
        s.stop()
    assert not any(os.path.exists(p) for p in buffers) and _ledger_entries() == []


@pytest.mark.skipif(not os.path.isdir(server_ledger.SHARED_MEMORY_DIR), reason="no /dev/shm here")
def test_shared_memory_of_a_server_killed_while_starting_is_swept(tmp_path: Path, own_ledger: Path) -> None:
    """A CPU server takes 20 s to start; pytest killed then must not leave its buffer for good."""
    script = tmp_path / "parent.py"
    config = {"startup_s": 600, "never_healthy": True, "shared_memory_bytes": 1 << 20}
    script.write_text(
        textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from sglperf.runtime.server import ServerSpec, launch
        launch(ServerSpec(name="starting", python=sys.executable, argv=("--model-path", "/x"),
               log_path=Path({str(tmp_path / "s.log")!r}), emulated=True, startup_timeout_s=600,
               env={{"SGLPERF_EMULATOR_CONFIG": json.dumps({config!r})}}))
    """)
    )
    parent = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "SGLPERF_HOME": str(own_ledger)})
    try:
        deadline = time.monotonic() + 30
        while not (entries := _ledger_entries()) and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.2)
        assert len(entries) == 1, f"no ledger entry within 30 s of start-up (parent exit {parent.poll()})"
        (entry,) = entries
        assert entry.name == "starting" and len(entry.paths) == 1 and os.path.exists(entry.paths[0])
        assert READY_LINE not in (tmp_path / "s.log").read_text()  # still starting
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        # A wait, not a bound: the server's death notice is quick on a quiet host, and took over 10 s on a
        # 2-CPU AVX2 EPYC with other processes busy.
        deadline = time.monotonic() + 60
        while entry.server_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not entry.server_alive()
        assert os.path.exists(entry.paths[0])  # nobody stopped it: the next launch's sweep must
        assert server_ledger.sweep() == list(entry.paths) and not os.path.exists(entry.paths[0])
        assert _ledger_entries() == []
    finally:
        parent.kill()


ESCAPING_SERVER = """
import os, sys, time
if os.fork() == 0:  # a worker
    if os.fork() == 0:  # its child: a session of its own, then its parent dies
        os.setsid()
        os.execvp("sleep", ["sleep", sys.argv[1]])
    time.sleep(1.0)
    os._exit(0)
time.sleep(600)  # the server itself never becomes healthy
"""


def test_a_process_that_left_a_killed_runs_server_is_stopped_by_the_next_sweep(
    tmp_path: Path, own_ledger: Path
) -> None:
    """pytest SIGKILLed: the server dies with it (PR_SET_PDEATHSIG), but a descendant in a session of
    its own, re-parented to init, is in no tree and no group; only the ledger still knows it."""
    marker = "58.4321"
    (tmp_path / "escaping.py").write_text(ESCAPING_SERVER)
    fake_python = tmp_path / "python"  # `python -m <module> ...` runs the escaping server instead
    fake_python.write_text(f"#!/bin/sh\nexec {sys.executable} {tmp_path / 'escaping.py'} {marker}\n")
    fake_python.chmod(0o755)
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from sglperf.runtime.server import ServerSpec, launch
        launch(ServerSpec(name="escaping", python={str(fake_python)!r}, argv=(),
               log_path=Path({str(tmp_path / "s.log")!r}), startup_timeout_s=600))
    """)
    )

    def escaped() -> list[int]:
        return [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]

    parent = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "SGLPERF_HOME": str(own_ledger)})
    try:
        deadline = time.monotonic() + 60

        def stray_written_down() -> bool:
            recorded = {pid for e in _ledger_entries() for pid, _ in e.descendants}
            return bool(escaped()) and escaped()[0] in recorded

        while time.monotonic() < deadline and not stray_written_down():
            time.sleep(0.2)
        (entry,) = _ledger_entries()
        (stray,) = escaped()
        assert os.getsid(stray) == stray and psutil.Process(stray).ppid() != entry.pid
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        # A wait, not a bound: the server's death notice is quick on a quiet host, and took over 10 s on a
        # 2-CPU AVX2 EPYC with other processes busy.
        deadline = time.monotonic() + 60
        while entry.server_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not entry.server_alive() and escaped() == [stray]  # the server died, its stray did not
        messages: list[str] = []
        server_ledger.sweep(messages.append)
        assert escaped() == [], "the next sweep left the stray running"
        assert any(f"stopping pid {stray} (sleep {marker}), left running by escaping" in m for m in messages)
        assert _ledger_entries() == []
    finally:
        parent.kill()
        for pid in escaped():
            os.kill(pid, signal.SIGKILL)
