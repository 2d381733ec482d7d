"""Shared fixtures for sglperf's own tests, and the layout by cost that keeps the fast tier fast:

* tests/unit: logic in this process only; the fast tier (`pytest tests/unit`);
* tests/integration: no real SGLang, but the emulator, pytest runs of the plugin, subprocesses,
  sockets or PostgreSQL;
* tests/sglang: a real SGLang, a managed release environment or the server on this CPU.

`-m "not needs_sglang"` selects unit and integration together: everything under tests/sglang is marked.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

# httpx imports httpcore on first use, and pytester drops the modules first imported during its test: the
# next test's httpx then raised httpcore's own ConnectError, past `except httpx.HTTPError` (its mapping
# holds the dropped module's classes). Imported here, before any test, it is never dropped.
import httpcore  # noqa: F401
import pytest
from hypothesis import settings

from sglperf.runtime import gpus, server_ledger
from sglperf.sglang import envs

from .support import quiet_host
from .support.postgres_server import Postgres
from .support.project import ROOT, SglangPython, make_project

TESTS = ROOT / "tests"
SGLANG_TESTS = TESTS / "sglang"
UNIT_TESTS = TESTS / "unit"
INTEGRATION_TESTS = TESTS / "integration"
# Fixtures a unit test may not ask for: each starts something (a pytest run, a database server).
NOT_IN_UNIT = ("pytester", "postgres")

# No property here bounds a time; Hypothesis's default 200 ms deadline per example does, and an xdist
# sibling or the hypervisor's steal on a 2-CPU runner stalls an example past it (DeadlineExceeded, or
# "Unreliable test timings", as a failure of the code).
settings.register_profile("sglperf", deadline=None)
settings.load_profile("sglperf")


def pytest_configure(config: pytest.Config) -> None:
    # A run started in the background by a shell without job control (`.ci/run &` in a script) inherits
    # SIGINT ignored, and so does every pytest and server its tests start: the Ctrl-C tests then wait for
    # nothing. A test process takes Python's own handler back, as a foreground run has it.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Pin the cache root now: pytester points HOME elsewhere, and the managed SGLang environments
    # (GBs, minutes to build) must be found where they are.
    os.environ.setdefault("SGLPERF_HOME", str(envs.home()))
    quiet_host.configure(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    quiet_host.unconfigure(config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    with quiet_host.turn(item):
        return (yield)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    misplaced: list[str] = []
    for item in items:
        path = Path(str(item.path))
        if path.is_relative_to(TESTS):
            item.add_marker(pytest.mark.selftest)
        # Whatever needs a real SGLang environment (directly or through a fixture that does) is marked
        # here, so that `-m "not needs_sglang"` stays the unit and integration folders together.
        fixtures = getattr(item, "fixturenames", ())
        if "sglang_python" in fixtures or path.is_relative_to(SGLANG_TESTS):
            item.add_marker(pytest.mark.needs_sglang)
        misplaced += _misplaced(item, path, fixtures)
    # Collection fails rather than the test: a costly test in a fast folder would otherwise pass
    # unnoticed, and slow every run of that folder from then on.
    if misplaced:
        raise pytest.UsageError("tests in the wrong folder for their cost:\n  " + "\n  ".join(misplaced))


def _misplaced(item: pytest.Item, path: Path, fixtures: tuple[str, ...] | list[str]) -> list[str]:
    if not (path.is_relative_to(UNIT_TESTS) or path.is_relative_to(INTEGRATION_TESTS)):
        return []
    if item.get_closest_marker("needs_sglang") is not None:
        why = "uses sglang_python" if "sglang_python" in fixtures else "is marked needs_sglang"
        return [f"{item.nodeid}: {why} (a real SGLang): move it to tests/sglang"]
    if path.is_relative_to(UNIT_TESTS):
        return [
            f"{item.nodeid}: uses the {name} fixture: move it to tests/integration"
            for name in NOT_IN_UNIT
            if name in fixtures
        ]
    return []


@pytest.fixture(autouse=True)
def own_history_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test records runs in a history store of its own, never in the user's
    (~/.local/share/sglperf), and no test sees another's runs."""
    path = tmp_path / "history" / "history.sqlite"
    monkeypatch.setenv("SGLPERF_HISTORY", str(path))
    return path


@pytest.fixture(scope="session")
def sglang_python() -> SglangPython:
    """Interpreter of the managed environment for a release, built on first use (minutes, once)."""

    def get(version: str) -> str:
        return str(envs.ensure_env(version, print).python)

    return get


@pytest.fixture
def own_sglperf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """SGLPERF_HOME of this test's own (the server ledger, the caches); the managed environments are
    then not found: only for tests that need none."""
    home = tmp_path / "home"
    monkeypatch.setenv("SGLPERF_HOME", str(home))
    return home


@pytest.fixture
def no_gpu_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No simulation, no pynvml, an empty PATH: a machine without GPUs. Returns the PATH folder."""
    monkeypatch.delenv(gpus.SIMULATED_ENV, raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


@pytest.fixture
def shm_file() -> Iterator[str]:
    """A 4 KiB file in /dev/shm, removed after the test if still there."""
    path = f"{server_ledger.SHARED_MEMORY_DIR}sglperf-test-{uuid.uuid4().hex}"
    with open(path, "wb") as fh:
        fh.write(b"\0" * 4096)
    try:
        yield path
    finally:
        if os.path.exists(path):
            os.unlink(path)


@pytest.fixture
def deployment_dir(tmp_path: Path) -> Path:
    return make_project(tmp_path)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    """A real PostgreSQL server for this test session (tests/support/postgres_server.py)."""
    from .support.postgres_server import binaries, started

    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed here (ci/setup.sh installs Debian's postgresql where it can)")
    yield from started(bin_dir)
