"""report.md and `sglperf compare` of two stored emulator runs, byte for byte against tests/data/golden/
(paths aside): a refactoring leaves every line as it was (tests/support/golden.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..support import golden

CASES = [pytest.param(case, id=case.name) for case in golden.CASES if not case.releases]


@pytest.mark.parametrize("case", CASES)
def test_the_command_prints_what_it_printed(case: golden.Case, tmp_path: Path) -> None:
    assert golden.run(case, tmp_path) == case.path.read_text(), (
        f"`sglperf {' '.join(case.args)}` prints otherwise than {case.path.name}: if the change means it, "
        f"rewrite it (python -m tests.support.golden --write {case.name}) and let the diff show what moved"
    )
