"""Shared fixtures for sglperf's own tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sglperf.sglang import envs

ROOT = Path(__file__).resolve().parent.parent
QWEN36 = ROOT / "deployments" / "qwen36.toml"
QWEN36_CONFIG = ROOT / "models" / "qwen3.6-27b" / "config.json"
# One release of each family the suite must handle: booleans (0.5.10-0.5.13), backend config (0.5.14+).
OLD_SGLANG = "0.5.13"
NEW_SGLANG = "0.5.23"


def pytest_configure(config: pytest.Config) -> None:
    # Pin the cache root now: pytester points HOME elsewhere, and the managed SGLang environments
    # (GBs, minutes to build) must be found where they are.
    os.environ.setdefault("SGLPERF_HOME", str(envs.home()))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.path)).is_relative_to(ROOT / "tests"):
            item.add_marker(pytest.mark.selftest)
        # The fast tier is `-m "not needs_sglang"`: whatever needs a real SGLang environment (directly
        # or through a fixture that does) is marked here, so a new test cannot slip into it by mistake.
        if "sglang_python" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.needs_sglang)


@pytest.fixture(autouse=True)
def own_history_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test records runs in a history store of its own, never in the user's
    (~/.local/share/sglperf), and no test sees another's runs."""
    path = tmp_path / "history" / "history.sqlite"
    monkeypatch.setenv("SGLPERF_HISTORY", str(path))
    return path


@pytest.fixture(scope="session")
def sglang_python():
    """Interpreter of the managed environment for a release, built on first use (minutes, once)."""

    def get(version: str) -> str:
        return str(envs.ensure_env(version, print).python)

    return get


def make_project(root: Path, deployment_text: str | None = None) -> Path:
    """A folder laid out like the repository: deployments/qwen36.toml, models/, data/prompts/."""
    (root / "deployments").mkdir(exist_ok=True)
    (root / "models" / "qwen3.6-27b").mkdir(parents=True, exist_ok=True)
    shutil.copy(QWEN36_CONFIG, root / "models" / "qwen3.6-27b" / "config.json")
    shutil.copytree(ROOT / "data" / "prompts", root / "data" / "prompts", dirs_exist_ok=True)
    if deployment_text is not None:
        (root / "deployments" / "qwen36.toml").write_text(deployment_text)
    return root


def with_workloads(text: str) -> str:
    """A deployment text with its [[workloads]] replaced (fast ones for emulator tests)."""
    start = QWEN36.read_text().index("# Workloads for the measurement tier.")
    return QWEN36.read_text()[:start] + text


@pytest.fixture
def deployment_dir(tmp_path: Path) -> Path:
    return make_project(tmp_path)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A real PostgreSQL server for this test session (tests/postgres_server.py)."""
    from .postgres_server import binaries, started

    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed here (ci/setup.sh installs Debian's postgresql where it can)")
    yield from started(bin_dir)
