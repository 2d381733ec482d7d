"""What preflight, explain and upgrade-check print, byte for byte against tests/data/golden/ (paths aside):
a refactoring leaves every line as it was; a change meant to alter one rewrites its file in the same
commit (tests/support/golden.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..support import golden
from ..support.project import SglangPython

CASES = [
    pytest.param(case, id=case.name, marks=[pytest.mark.long] if case.long else [])
    for case in golden.CASES
    if case.releases
]


@pytest.mark.parametrize("case", CASES)
def test_the_command_prints_what_it_printed(case: golden.Case, sglang_python: SglangPython, tmp_path: Path) -> None:
    for release in case.releases:
        sglang_python(release)  # built by the fixture; the command then finds it as a user's would
    assert golden.run(case, tmp_path) == case.path.read_text(), (
        f"`sglperf {' '.join(case.args)}` prints otherwise than {case.path.name}: if the change means it, "
        f"rewrite it (python -m tests.support.golden --write {case.name}) and let the diff show what moved"
    )
