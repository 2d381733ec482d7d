"""Busy neighbours for the busy-host tests: CPU-bound processes that are not the test's descendants."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil


@contextmanager
def foreign_spinners(count: int = 1) -> Iterator[list[psutil.Process]]:
    """``count`` busy loops started through a shell that exits at once, so init adopts them: to
    sglperf's host probe they are someone else's work, as a compiler job on a shared runner is."""
    spinners: list[psutil.Process] = []
    try:
        for _ in range(count):
            out = subprocess.run(
                ["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
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
