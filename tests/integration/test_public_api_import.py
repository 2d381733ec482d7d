"""Importing the public API (`sglperf/__init__.py`) in a fresh interpreter loads only what it must."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_package_loads_neither_pytest_nor_the_fixtures() -> None:
    """The CLI, the preflight worker and the emulator import sglperf modules: the API's names load on use."""
    code = "import sys, sglperf; print('pytest' in sys.modules, 'sglperf.plugin' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_the_pytest_plugin_draws_no_figure_at_start() -> None:
    """Every `pytest` in the harness's environment loads the plugin; pyplot (0.4 s) waits for a figure."""
    code = "import sys, sglperf.plugin; print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False"]
