"""Tests marked quiet_host run alone under pytest-xdist, the others side by side.

The meter drops a round in which other processes took the CPU (sglperf.model.host_load), so a
measuring test beside another worker's test would fail, or on the emulator measure that test. Every
test holds one lock file while it runs: shared for most, exclusive for quiet_host. A turnstile, taken
by both kinds before the lock and let go once it is held, keeps a stream of shared holders from
starving an exclusive one. Without xdist (no folder from the controller), and in a pytest that a
test starts, nothing is locked.

The lock keeps this suite's own tests apart, not a neighbour's work (a shared CI runner's other jobs,
the hypervisor's steal). `judged_on_a_quiet_host` is for a timing assertion that such a neighbour
breaks: it fails on a quiet host, and skips, naming what the host did, when the host was busy.
`cpu_of_others` and `used_between` read what the processes not ours used over a window, for tests that
hold the host probe's foreign time against it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import psutil
import pytest

from sglperf.model.host_load import HOST_STAYED_BUSY
from sglperf.runtime.host_probe import HostProbe

# What the rest of the machine may take before a timing assertion no longer judges the code: the VMs this
# suite runs on take CPU back while both of theirs are busy (0.11-0.25 s of a 0.2 s round in one run).
BUSY_HOST_SHARE = 0.15
# The quiet wait of the measurements nested pytest runs make (the plugin's default is 60 s a measurement): a
# neighbour that stays busy refuses each after this long, and the test skips (skip_if_the_host_stayed_busy)
# minutes sooner. A test's own --quiet-wait, given later, wins.
QUIET_WAIT = "--quiet-wait=15"

# Where the workers find the lock files: set by the controller before it starts them.
LOCKS_ENV = "SGLPERF_TEST_QUIET_HOST_LOCKS"


def _is_xdist_controller(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def configure(config: pytest.Config) -> None:
    if _is_xdist_controller(config):
        os.environ[LOCKS_ENV] = tempfile.mkdtemp(prefix="sglperf-quiet-host-")


def unconfigure(config: pytest.Config) -> None:
    if _is_xdist_controller(config) and LOCKS_ENV in os.environ:
        shutil.rmtree(os.environ.pop(LOCKS_ENV), ignore_errors=True)


@contextlib.contextmanager
def turn(item: pytest.Item) -> Iterator[None]:
    """Hold the host (shared, or alone for quiet_host) while the item's setup, call and teardown run."""
    folder = os.environ.get(LOCKS_ENV)
    # Workers only: a pytest a test starts (a nightly run in a checkout of this repository) inherits the
    # variable, and waiting for the lock its own test holds would hang both.
    if folder is None or not Path(folder).is_dir() or not hasattr(item.config, "workerinput"):
        yield
        return
    alone = item.get_closest_marker("quiet_host") is not None
    with open(Path(folder) / "turnstile", "a") as turnstile, open(Path(folder) / "host", "a") as host:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(host, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(host, fcntl.LOCK_UN)


@contextlib.contextmanager
def judged_on_a_quiet_host(limit: float = BUSY_HOST_SHARE) -> Iterator[None]:
    """Run a block whose assertions bound a time or a rate. A failure stands when the rest of the machine
    took at most ``limit`` of its CPU meanwhile; above that the test skips with the host's record (those
    numbers measured the neighbour). Only for quiet_host tests: beside another worker, that worker is the
    neighbour."""
    probe = HostProbe()
    probe.start()
    try:
        yield
    except AssertionError:
        load = probe.stop()
        if load.disturbed(limit):
            pytest.skip(f"not judged: the host was busy while it ran: {load.describe()} (limit {limit:.0%})")
        raise


def skip_if_the_host_stayed_busy(result: pytest.RunResult) -> None:
    """A nested run whose measurements the host-load guard refused (a neighbour kept the CPU busy past its
    quiet wait) cannot be judged: skip with the guard's own line, which names the busiest processes."""
    # The guard's line is a FAILED line's reason under -rA, or stands alone in the failure's report.
    if result.ret == 0:
        return
    skip_if_the_guard_said_so(result.outlines)


def skip_if_the_guard_said_so(lines: Iterable[str]) -> None:
    """A command's output (a nested run's, an `sglperf` subprocess's stderr) in which the host-load guard refused
    the measurements: skip with its line."""
    for line in lines:
        if HOST_STAYED_BUSY in line:
            said = re.sub(r"^E\s+[\w.]+Error:\s*", "", line.split(" - ", 1)[-1].strip())  # a traceback's line
            pytest.skip(f"not judged: {said[:400]}")


def cpu_of_others() -> dict[tuple[int, float], float]:
    """(pid, create time) -> CPU seconds so far, reaped children's included, for every process not ours."""
    ours = {p.pid for p in (psutil.Process(), *psutil.Process().children(recursive=True))}
    found: dict[tuple[int, float], float] = {}
    for proc in psutil.process_iter():
        if proc.pid in ours:
            continue
        try:
            t = proc.cpu_times()
            found[(proc.pid, proc.create_time())] = t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return found


def used_between(before: dict[tuple[int, float], float], after: dict[tuple[int, float], float]) -> float:
    """What processes not ours used in between. One that exits in the window is reaped by its parent, whose
    children's times then carry its whole life: counted whole, the others read high, never low (a plain sum
    of user + system read -5.3 s on CI when an xdist sibling's 5.3-second subprocess exited)."""
    return sum(cpu - before.get(key, 0.0) for key, cpu in after.items())
