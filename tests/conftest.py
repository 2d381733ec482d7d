"""Shared fixtures for sglperf's own tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from sglperf import envs

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


@pytest.fixture(scope="session")
def sglang_python():
    """Interpreter of the managed environment for a release, built on first use (minutes, once)."""

    def get(version: str) -> str:
        return str(envs.ensure_env(version, print).python)

    return get


@pytest.fixture
def deployment_dir(tmp_path: Path) -> Path:
    """A folder laid out like the repository: deployments/ and models/ with the qwen3.6 config."""
    (tmp_path / "deployments").mkdir()
    (tmp_path / "models" / "qwen3.6-27b").mkdir(parents=True)
    shutil.copy(QWEN36_CONFIG, tmp_path / "models" / "qwen3.6-27b" / "config.json")
    return tmp_path
