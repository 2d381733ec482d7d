"""Reading Linux's CPU counters around a round: how much the rest of the machine took (`model.host_load`).

Ours is this process and every descendant (the server sglperf launched and its workers, the
emulator), read per process from ``/proc/<pid>/stat`` (user, system and reaped children's times);
the machine's from ``/proc/stat`` (user, nice, system: interrupt time is left out, since the
loopback traffic between meter and server is counted there and is ours). Foreign = the machine's
minus ours. A process of ours that exits unreaped during the round loses its last moments to
"foreign"; one reaped by a parent of ours brings its whole lifetime into the parent's children's
times, so ours reads high. Both are rare and small next to a busy neighbour.

Each counter is an integer number of clock ticks, truncated when read: the error of a difference
is uniform in (-1, 1) tick, variance 1/6, so the summed rounding of k counters has a standard
deviation of sqrt(k/6) ticks; two of those are the slack a round must exceed to be disturbed. Two,
not more: a quiet round that rounding pushes over (about 2% of them) is only run again, while a
disturbed round kept is blamed on SGLang (on a 2-CPU box, with SGLang's default OpenMP binding, a
neighbour with a quarter of the CPU slowed the tiny CPU server 2.7x: bench/host_load.py).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import psutil

from sglperf.model.host_load import HostLoad

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
PROCESS_COUNTERS = 4  # utime, stime, cutime, cstime
SYSTEM_COUNTERS_PER_CPU = 4  # user, nice, system, steal
SLACK_SIGMAS = 2.0


@dataclass(frozen=True)
class _Reading:
    at: float
    busy_s: float  # the machine's user + nice + system
    steal_s: float
    ours: dict[tuple[int, float], float]  # (pid, create time) -> CPU seconds, reaped children included


def _cpu_by_process(procs: Iterable[psutil.Process]) -> dict[tuple[int, float], float]:
    """(pid, create time) -> CPU seconds so far, reaped children included; gone processes left out."""
    found: dict[tuple[int, float], float] = {}
    for proc in procs:
        try:
            with proc.oneshot():
                t = proc.cpu_times()
                found[(proc.pid, proc.create_time())] = t.user + t.system + t.children_user + t.children_system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # exited since it was listed
    return found


def _ours(roots: Sequence[int] = ()) -> dict[tuple[int, float], float]:
    """This process's tree, and the trees of ``roots`` (servers started for us outside it: Slurm's step daemons)."""
    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    for pid in roots:
        try:
            root = psutil.Process(pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    return _cpu_by_process(procs)


def _read(roots: Sequence[int] = ()) -> _Reading:
    ours = _ours(roots)
    machine = psutil.cpu_times()
    return _Reading(
        time.perf_counter(), machine.user + machine.nice + machine.system, getattr(machine, "steal", 0.0), ours
    )


def available() -> str | None:
    """None when the probe works here, else why not (the counters it needs are Linux's)."""
    if not hasattr(psutil.cpu_times(), "steal"):
        return "host load not measured: this system does not report steal time (Linux only)"
    return None


class HostProbe:
    """``start()`` before a round, ``stop()`` after it: what the rest of the machine took in between."""

    def __init__(self, roots: Callable[[], Sequence[int]] | None = None) -> None:
        self._start: _Reading | None = None
        self.cpus = psutil.cpu_count() or 1
        self._roots = roots or (lambda: ())

    def start(self) -> None:
        self._start = _read(self._roots())

    def stop(self) -> HostLoad:
        if self._start is None:
            raise RuntimeError("HostProbe.stop() without start()")
        end, start = _read(self._roots()), self._start
        self._start = None
        ours = sum(cpu - start.ours.get(key, 0.0) for key, cpu in end.ours.items())
        counters = PROCESS_COUNTERS * len(end.ours.keys() | start.ours.keys()) + SYSTEM_COUNTERS_PER_CPU * self.cpus
        return HostLoad(
            wall_s=end.at - start.at,
            cpus=self.cpus,
            foreign_cpu_s=(end.busy_s - start.busy_s) - ours,
            steal_cpu_s=end.steal_s - start.steal_s,
            slack_cpu_s=SLACK_SIGMAS * math.sqrt(counters / 6.0) * TICK_S,
        )

    def busiest_others(self, interval_s: float = 0.5, top: int = 3) -> str:
        """The processes outside ours that used the most CPU over the next ``interval_s``, for a message."""
        ours = {pid for pid, _ in _ours(self._roots())}
        others = [p for p in psutil.process_iter() if p.pid not in ours]
        before = _cpu_by_process(others)
        time.sleep(interval_s)
        after = _cpu_by_process(others)
        by_pid = {p.pid: p for p in others}
        used = sorted(((cpu - before.get(key, cpu), key) for key, cpu in after.items()), reverse=True)
        shown = []
        for cpu, key in used[:top]:
            if cpu <= 0:
                break
            try:
                name = by_pid[key[0]].name()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                name = "?"
            shown.append(f"{name} (pid {key[0]}, {cpu / interval_s:.0%} of a CPU)")
        return ", ".join(shown) or "none now (the load was short-lived, or it is steal)"
