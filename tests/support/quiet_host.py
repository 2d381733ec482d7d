"""Tests marked quiet_host run alone under pytest-xdist, the others side by side.

The meter drops a round in which other processes took the CPU (sglperf.model.host_load), so a
measuring test beside another worker's test would fail, or on the emulator measure that test. Every
test holds one lock file while it runs: shared for most, exclusive for quiet_host. A turnstile, taken
by both kinds before the lock and let go once it is held, keeps a stream of shared holders from
starving an exclusive one. Without xdist (no folder from the controller), and in a pytest that a
test starts, nothing is locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

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
