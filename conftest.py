"""Repository conftest: the suite itself is the `sglperf` pytest plugin (entry point `pytest11`)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Without the plugin, deployments/*.toml would be collected as nothing and the run would look green.
    if not config.pluginmanager.has_plugin("sglperf"):
        raise pytest.UsageError(
            "the sglperf plugin is not installed in this interpreter: run `ci/setup.sh` "
            "(or `pip install -e '.[test]'`) and use .venv/bin/pytest"
        )
