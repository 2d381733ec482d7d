"""The scripts in ci/: valid bash, executable, and calling only sglperf subcommands and pytest options
that exist."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglperf.cli import build_parser

from ..support.project import ROOT

SCRIPTS = sorted((ROOT / "ci").glob("*.sh"))


def _cli_subcommands() -> set[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def _pytest_options() -> set[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, cwd=ROOT)
    return set(re.findall(r"(--[a-z][a-z0-9-]+)", proc.stdout))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_are_valid_bash_and_call_existing_commands(script: Path) -> None:
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert os.access(script, os.X_OK)
    text = script.read_text()
    for sub in re.findall(r"\.venv/bin/sglperf (\S+)", text):
        assert sub in _cli_subcommands() | {"env"}, f"{script.name}: `sglperf {sub}` does not exist"
    known = _pytest_options()
    for call in re.findall(r"\.venv/bin/pytest((?:[^\n]*\\\n)*[^\n]*)", text):
        for option in re.findall(r"(?<![\w$-])(--[a-z][a-z0-9-]*)", call):
            assert option in known, f"{script.name}: pytest has no option {option}"


def test_postgresql_is_installed_by_the_test_set_up_not_by_the_main_job() -> None:
    # The main job (ci/preflight.sh, through ci/setup.sh) never touches PostgreSQL: only sglperf's own
    # history-store tests need it, and an apt-get there costs every user's first run (issue 41).
    for name in ("setup.sh", "preflight.sh"):
        text = (ROOT / "ci" / name).read_text().lower()
        assert "apt-get" not in text and "install -y -qq postgresql" not in text, name
    selftest = (ROOT / "ci" / "selftest.sh").read_text()
    install = selftest.index("apt-get install -y -qq postgresql")
    assert install < selftest.index("exec .venv/bin/pytest"), "PostgreSQL must be installed before the tests run"
    assert selftest.count("the PostgreSQL history-store tests will skip") == 2  # no root, or the install failed
