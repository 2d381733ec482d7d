"""What a server left behind when nobody could stop it (pytest or the machine killed hard): shared
memory, and processes that left its session.

SGLang's CPU backend maps a 270 MB ``deepspeed_allreduce_buffer_*`` file in /dev/shm per start and
never unlinks it; `server.Server.stop` removes what the server mapped. A SIGKILL of pytest skips
that stop (its servers die with it, through PR_SET_PDEATHSIG), and on RAM-backed /dev/shm the files
pile up run after run: eight of them, 2.1 GB, were found on this project's CI machine.

So the files a server maps are written down in a ledger entry (one JSON file per server under
``<sglperf home>/shared-memory/``) while it starts, and completed before it is announced healthy: a
kill during the 20 s of a CPU server's start-up, or right after "healthy", must not escape it. The
entry is removed again when the server stops. Before each launch the ledger is swept: an entry whose
server is gone has its files removed, but only files that are still in /dev/shm and that no running
process maps (a new server on the same port would reuse the name). An entry that cannot be read is
left alone and named: nothing is deleted on a guess.

The entry also lists every process seen in the server's tree while it started (pid and start time).
The launcher dies with pytest (PR_SET_PDEATHSIG) and SGLang's workers with the launcher, but a
descendant that started a session of its own and lost its parent is in no tree and no group: only
this list still knows it. The sweep stops those that still run, matched by pid *and* start time, so
a reused pid is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from sglperf.errors import SglperfError
from sglperf.model.files import write_text_atomic
from sglperf.model.progress import Progress, silent
from sglperf.sglang import envs

SHARED_MEMORY_DIR = "/dev/shm/"
LEDGER_DIR_NAME = "shared-memory"
STOP_GRACE_S = 5.0  # SIGTERM, then SIGKILL, for a descendant the sweep stops
SAME_PROCESS_S = 0.01  # start times (psutil, 10 ms ticks) this close are one process


def ledger_dir() -> Path:
    return envs.home() / LEDGER_DIR_NAME


@dataclass(frozen=True)
class LedgerEntry:
    pid: int
    create_time: float
    name: str
    paths: tuple[str, ...]
    # (pid, start time) of each process seen in the server's tree, the server's own pid excluded
    descendants: tuple[tuple[int, float], ...] = field(default=())

    @property
    def file(self) -> Path:
        return ledger_dir() / f"{self.pid}-{int(self.create_time * 1000)}.json"

    def server_alive(self) -> bool:
        return _same_process(self.pid, self.create_time) is not None

    def descendants_alive(self) -> list[psutil.Process]:
        return [p for pid, created in self.descendants if (p := _same_process(pid, created)) is not None]


def _same_process(pid: int, create_time: float) -> psutil.Process | None:
    """The process ``pid`` if it is still the one that started at ``create_time``."""
    try:
        proc = psutil.Process(pid)
        return proc if abs(proc.create_time() - create_time) < SAME_PROCESS_S else None
    except psutil.Error:
        return None


def in_shared_memory(path: str) -> bool:
    """A file directly in /dev/shm (no sub-folder, no way out of it)."""
    return os.path.dirname(os.path.normpath(path)) + "/" == SHARED_MEMORY_DIR


def record(pid: int, name: str, paths: set[str], descendants: Mapping[int, float] | None = None) -> LedgerEntry | None:
    """Write down what a server maps in /dev/shm and which processes its tree had; None when there is
    neither."""
    kept = tuple(sorted(p for p in paths if in_shared_memory(p)))
    others = tuple(sorted((p, t) for p, t in (descendants or {}).items() if p != pid))
    if not kept and not others:
        return None
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        return None
    entry = LedgerEntry(pid, created, name, kept, others)
    entry.file.parent.mkdir(parents=True, exist_ok=True)
    data = {"pid": pid, "create_time": created, "name": name, "paths": kept, "descendants": others}
    write_text_atomic(entry.file, json.dumps(data))
    return entry


def forget(entry: LedgerEntry | None) -> None:
    if entry is not None:
        with contextlib.suppress(FileNotFoundError):
            entry.file.unlink()


class LedgerError(SglperfError, ValueError):
    """A ledger entry that cannot be read; its message names the file and says what to do."""


def read_entry(file: Path) -> LedgerEntry:
    try:
        data = json.loads(file.read_text())
        paths = data["paths"]
        if not isinstance(paths, list) or not all(isinstance(p, str) and in_shared_memory(p) for p in paths):
            raise ValueError("paths: expected a list of files directly in /dev/shm")
        # Entries written before descendants were recorded have none.
        descendants = tuple((int(pid), float(created)) for pid, created in data.get("descendants", []))
        if any(pid <= 1 for pid, _ in descendants):
            raise ValueError("descendants: expected (pid, start time) pairs of user processes")
        return LedgerEntry(int(data["pid"]), float(data["create_time"]), str(data["name"]), tuple(paths), descendants)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LedgerError(f"shared-memory ledger {file}: unreadable ({exc}); left as it is, remove it by hand") from exc


def entry_files() -> list[Path]:
    """The ledger's entries, oldest name first; none when there is no ledger yet."""
    folder = ledger_dir()
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def mapped_files(pid: int) -> set[str]:
    """Files directly in /dev/shm that process ``pid`` maps; empty when it is gone.

    Read from /proc/<pid>/maps, not psutil's ``memory_maps`` (smaps): the server's start-up is polled
    with this, and smaps makes the kernel count pages for every mapping of a torch process."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    found = set()
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and in_shared_memory(fields[5]) and not fields[5].endswith(" (deleted)"):
            found.add(fields[5])
    return found


def _mapped_by_someone(paths: set[str]) -> set[str]:
    """Which of ``paths`` some running process maps (or has open)."""
    found: set[str] = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            found |= mapped_files(proc.pid) & paths
            found |= {f.path for f in proc.open_files() if f.path in paths}
    return found


def _stop_descendants(entry: LedgerEntry, progress: Progress) -> list[psutil.Process]:
    """Stop what still runs of a gone server's descendants; returns those that would not die."""
    alive = entry.descendants_alive()
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            progress(
                f"stopping pid {proc.pid} ({' '.join(proc.cmdline())[:120]}), left running by {entry.name} "
                f"(pid {entry.pid}, no longer running)"
            )
            proc.terminate()
    _, alive = psutil.wait_procs(alive, timeout=STOP_GRACE_S)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _, survivors = psutil.wait_procs(alive, timeout=STOP_GRACE_S)
    for proc in survivors:
        progress(f"pid {proc.pid}, left running by {entry.name}, survived SIGKILL; its ledger entry is kept")
    return list(survivors)


def sweep(progress: Progress = silent) -> list[str]:
    """Stop what servers that are gone left running and remove what they left in /dev/shm; returns
    the files removed."""
    removed: list[str] = []
    for file in entry_files():
        try:
            entry = read_entry(file)
        except LedgerError as exc:
            progress(str(exc))
            continue
        if entry.server_alive():
            continue
        # First the processes: one of them may be what still maps the files.
        survivors = _stop_descendants(entry, progress)
        present = {p for p in entry.paths if os.path.exists(p)}
        in_use = _mapped_by_someone(present) if present else set()
        gone = []
        for path in sorted(present - in_use):
            with contextlib.suppress(FileNotFoundError, PermissionError):
                size = os.path.getsize(path)
                os.unlink(path)
                gone.append(path)
                removed.append(path)
                progress(
                    f"removed {path} ({size / 2**20:.0f} MiB of shared memory) left by {entry.name} "
                    f"(pid {entry.pid}, no longer running)"
                )
        if not in_use and not survivors:
            forget(entry)
    return removed
