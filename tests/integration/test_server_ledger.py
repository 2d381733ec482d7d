"""The shared-memory ledger around real processes: what a killed server left in /dev/shm is removed, and
nothing else (entries and paths alone: tests/unit/test_server_ledger_entries.py)."""

from __future__ import annotations

import mmap
import os
import subprocess

import psutil
import pytest

from sglperf import cli
from sglperf.runtime import server_ledger

pytestmark = [
    pytest.mark.skipif(not os.path.isdir(server_ledger.SHARED_MEMORY_DIR), reason="no /dev/shm here"),
    pytest.mark.usefixtures("own_sglperf_home"),
]


def _dead_server(paths: set[str]) -> server_ledger.LedgerEntry:
    """A ledger entry written for a process that has since been killed."""
    proc = subprocess.Popen(["sleep", "60"])
    entry = server_ledger.record(proc.pid, "tiny-cpu-plain", paths)
    proc.kill()
    proc.wait()
    assert entry is not None and entry.file.is_file()
    return entry


def test_files_of_a_server_that_is_gone_are_removed_with_its_entry(shm_file: str) -> None:
    entry = _dead_server({shm_file})
    messages: list[str] = []
    assert server_ledger.sweep(messages.append) == [shm_file]
    assert not os.path.exists(shm_file) and not entry.file.exists()
    assert messages == [
        f"removed {shm_file} (0 MiB of shared memory) left by tiny-cpu-plain (pid {entry.pid}, no longer running)"
    ]


def test_a_running_server_keeps_its_files(shm_file: str) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        entry = server_ledger.record(proc.pid, "tiny-cpu-plain", {shm_file})
        assert server_ledger.sweep() == [] and os.path.exists(shm_file)
        assert entry is not None and entry.file.is_file()
    finally:
        proc.kill()
        proc.wait()


def test_a_file_some_process_maps_is_kept_and_so_is_the_entry(shm_file: str) -> None:
    # A new server on the same port reuses the file name: what a live process maps is never removed.
    entry = _dead_server({shm_file})
    with open(shm_file, "r+b") as fh, mmap.mmap(fh.fileno(), 4096):
        assert server_ledger.sweep() == []
        assert os.path.exists(shm_file) and entry.file.is_file()
    assert server_ledger.sweep() == [shm_file]


def test_only_files_directly_in_dev_shm_are_written_down(shm_file: str) -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert server_ledger.record(proc.pid, "s", {"/tmp/x", "/dev/shm/../etc/passwd"}) is None
        entry = server_ledger.record(proc.pid, "s", {shm_file, "/dev/shm/sub/x"})
        assert entry is not None and entry.paths == (shm_file,)
    finally:
        proc.kill()
        proc.wait()


def test_the_command_lists_the_ledger_then_sweeps_it(shm_file: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`sglperf shm`: for a machine that will not launch a server again (no sweep at the next launch)."""
    entry = _dead_server({shm_file})
    bad = server_ledger.ledger_dir() / "1-2.json"
    bad.write_text("{")
    assert cli.main(["shm", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed == [
        f"shared-memory ledger {bad}: unreadable (Expecting property name enclosed in double quotes: line 1 "
        "column 2 (char 1)); left as it is, remove it by hand",
        f"tiny-cpu-plain (pid {entry.pid}, gone: `sglperf shm sweep` removes what it left)",
        f"  {shm_file} (0 MiB)",
    ]
    assert os.path.exists(shm_file)  # listing removes nothing
    assert cli.main(["shm", "sweep"]) == 0
    said = capsys.readouterr().err
    assert f"removed {shm_file}" in said and "1 file(s) removed from /dev/shm/" in said
    assert not os.path.exists(shm_file) and not entry.file.exists() and bad.is_file()
    assert cli.main(["shm", "list"]) == 0
    assert capsys.readouterr().out.splitlines() == [listed[0]]
    bad.unlink()
    assert cli.main(["shm", "list"]) == 0
    assert capsys.readouterr().err.startswith("no server's shared memory or processes are written down in ")


# -- processes that left the server's session ------------------------------------------------------------


def _escaped(marker: str) -> subprocess.Popen[bytes]:
    """A process in a session of its own, as a server's worker that called setsid() would be."""
    return subprocess.Popen(["sleep", marker], start_new_session=True)


def _started(proc: subprocess.Popen[bytes]) -> float:
    return float(psutil.Process(proc.pid).create_time())


def test_a_gone_servers_descendant_that_still_runs_is_stopped_and_the_entry_removed() -> None:
    stray = _escaped("61.25")
    try:
        server = subprocess.Popen(["sleep", "60"])
        entry = server_ledger.record(server.pid, "tiny-cpu-plain", set(), {stray.pid: _started(stray)})
        server.kill()
        server.wait()
        assert entry is not None and entry.descendants == ((stray.pid, _started(stray)),)
        messages: list[str] = []
        assert server_ledger.sweep(messages.append) == []
        stray.wait(timeout=10)  # (psutil reaped it already: our child here, not in real use)
        assert not psutil.pid_exists(stray.pid)
        assert messages == [
            f"stopping pid {stray.pid} (sleep 61.25), left running by tiny-cpu-plain "
            f"(pid {entry.pid}, no longer running)"
        ]
        assert not entry.file.exists()
    finally:
        stray.kill()
        stray.wait()


def test_a_reused_pid_is_never_signalled() -> None:
    """Same pid, another start time: another process, which the sweep must leave alone."""
    other = _escaped("62.5")
    try:
        server = subprocess.Popen(["sleep", "60"])
        entry = server_ledger.record(server.pid, "s", set(), {other.pid: _started(other) - 100.0})
        server.kill()
        server.wait()
        assert entry is not None
        assert server_ledger.sweep() == [] and other.poll() is None and not entry.file.exists()
    finally:
        other.kill()
        other.wait()


def test_a_running_servers_descendants_are_left_alone() -> None:
    stray = _escaped("63.75")
    server = subprocess.Popen(["sleep", "60"])
    try:
        entry = server_ledger.record(server.pid, "s", set(), {stray.pid: _started(stray)})
        assert server_ledger.sweep() == [] and stray.poll() is None
        assert entry is not None and entry.file.is_file()
    finally:
        for proc in (server, stray):
            proc.kill()
            proc.wait()
