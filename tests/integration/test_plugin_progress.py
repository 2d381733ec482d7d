"""Progress lines reach the terminal while a test runs (not only inside a failure), under xdist too,
and the run's progress.log."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

USER_TEST = """
from sglperf.plugin.keys import PROGRESS_KEY

def test_long_step(request):
    request.config.stash[PROGRESS_KEY]("qwen36-mtp1: starting (a long step)")
"""


@pytest.mark.parametrize("xdist", [False, True])
def test_progress_is_shown_live_and_logged(pytester: pytest.Pytester, tmp_path: Path, xdist: bool) -> None:
    pytester.makepyfile(test_user=USER_TEST)
    results = tmp_path / "results"
    args = ["-p", "no:cacheprovider", f"--results-dir={results}", *(["-n", "1"] if xdist else [])]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=1)
    # A passing test: the line can only be there if it escaped pytest's capture.
    shown = result.stdout.str() + result.stderr.str()
    assert "[sglperf]" in shown and "qwen36-mtp1: starting (a long step)" in shown, shown
    assert ("[gw0]" in shown) is xdist
    assert "qwen36-mtp1: starting (a long step)" in (results / "progress.log").read_text()
