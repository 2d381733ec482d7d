"""Busy neighbours for the busy-host check's tests and bench: CPU-bound processes that are not ours."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

# Busy for DUTY of every 20 ms, asleep for the rest.
SPIN = """
import sys, time
busy = 0.02 * float(sys.argv[1])
while True:
    end = time.perf_counter() + busy
    while time.perf_counter() < end:
        pass
    time.sleep(0.02 - busy)
"""


@contextmanager
def foreign_spinners(count: int = 1, duty: float = 1.0) -> Iterator[list[psutil.Process]]:
    """``count`` busy loops, each busy ``duty`` of the time, started through a shell that exits at
    once so init adopts them: to sglperf's host probe they are someone else's work, as a compiler job
    on a shared runner is."""
    if not 0.0 < duty <= 1.0:
        raise ValueError(f"duty must be in (0, 1], got {duty}")
    spinners: list[psutil.Process] = []
    code = shlex.quote(SPIN)
    try:
        for _ in range(count):
            out = subprocess.run(
                ["sh", "-c", f"{shlex.quote(sys.executable)} -c {code} {duty} >/dev/null 2>&1 & echo $!"],
                capture_output=True,
                text=True,
                check=True,
            )
            spinners.append(psutil.Process(int(out.stdout.strip())))
        ours = {p.pid for p in psutil.Process().children(recursive=True)}
        assert not ours & {p.pid for p in spinners}, "a spinner is still the test's descendant"
        time.sleep(0.2)  # running, not starting
        yield spinners
    finally:
        for proc in spinners:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
