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


def test_the_cli_parser_and_a_preflight_load_no_store_statistics_or_report() -> None:
    """`sglperf --help` and a warm preflight paid 0.5 s for the history store, numpy and the report (1.4 s in
    all on a 2-CPU AVX2 EPYC): each command imports what only it uses."""
    heavy = ("numpy", "sglperf.history.sql_store", "sglperf.reporting.markdown", "sglperf.baselines.regression")
    code = (
        "import sys, sglperf.cli as cli; cli.build_parser().format_help();"
        "from sglperf.history import HISTORY_ENV; from sglperf import preflight;"
        f"print(*[m for m in {heavy!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == []
    # The store's names still load on use.
    code = "from sglperf.history import HistoryError, SqlHistoryStore; print(SqlHistoryStore.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["sglperf.history.sql_store"]
