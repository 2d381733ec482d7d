"""The layout by cost holds: tests/conftest.py refuses a run in which a test that needs a real SGLang
sits in tests/unit or tests/integration, or a pytest run or PostgreSQL in tests/unit; and
`-m "not needs_sglang"` leaves tests/sglang out; a user's run collects the deployments only."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.project import ROOT

pytest_plugins = ["pytester"]

USES_SGLANG = "def test_resolves(sglang_python):\n    sglang_python('0.5.23')\n"
MARKED = "import pytest\n\npytestmark = pytest.mark.needs_sglang\n\n\ndef test_marked():\n    pass\n"
RUNS_PYTEST = "def test_runs_pytest(pytester):\n    pass\n"
PLAIN = "def test_plain():\n    pass\n"


def _suite(root: Path, files: dict[str, str]) -> None:
    """A copy of this suite's conftest and helpers in a tests/ folder of its own, with ``files`` in it."""
    tests = root / "tests"
    shutil.copytree(ROOT / "tests" / "support", tests / "support", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "tests" / "conftest.py", tests / "conftest.py")
    shutil.copy(ROOT / "pytest.ini", root / "pytest.ini")
    for folder in ("", "unit", "integration", "sglang"):
        (tests / folder).mkdir(exist_ok=True)
        (tests / folder / "__init__.py").touch()
    for name, text in files.items():
        (tests / name).write_text(text)


def test_a_costly_test_in_a_fast_folder_fails_the_run_naming_it_and_where_it_belongs(
    pytester: pytest.Pytester,
) -> None:
    _suite(
        pytester.path,
        {
            "unit/test_a.py": USES_SGLANG + "\n\n" + RUNS_PYTEST,
            "integration/test_b.py": MARKED,
            "integration/test_c.py": RUNS_PYTEST,  # where a pytest run belongs
        },
    )
    # A subprocess: the copy's package is `tests`, like this suite's own.
    result = pytester.runpytest_subprocess("tests", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    said = result.stderr.str()
    assert "tests in the wrong folder for their cost:" in said
    assert "tests/unit/test_a.py::test_resolves: uses sglang_python (a real SGLang): move it to tests/sglang" in said
    assert "tests/unit/test_a.py::test_runs_pytest: uses the pytester fixture: move it to tests/integration" in said
    assert "tests/integration/test_b.py::test_marked: is marked needs_sglang (a real SGLang)" in said
    assert "test_c.py" not in said


def test_not_needs_sglang_is_the_unit_and_integration_folders(pytester: pytest.Pytester) -> None:
    _suite(
        pytester.path,
        {
            "unit/test_a.py": PLAIN,
            "integration/test_b.py": PLAIN.replace("test_plain", "test_against_the_emulator"),
            "sglang/test_c.py": USES_SGLANG,
            "sglang/test_d.py": PLAIN.replace("test_plain", "test_on_the_cpu_server"),  # marked by its folder
        },
    )
    result = pytester.runpytest_subprocess("tests", "-m", "not needs_sglang", "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2, deselected=2)


def test_a_users_run_collects_the_deployments_not_this_suites_own_tests() -> None:
    """`pytest -k qwen36 --update-baselines`, the baseline refresh, ran sglperf's own tests named after
    qwen36 too (real preflight in three SGLang releases), and every run imported all of them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-k", "qwen36", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    ids = [line for line in collected.stdout.splitlines() if "::" in line]
    assert ids, collected.stdout + collected.stderr
    assert [i for i in ids if not i.startswith("deployments/qwen36.toml::")] == [], collected.stdout


# Each test writes when it ran; the quiet one must overlap none of the others.
TIMED = """
import json, os, time
from pathlib import Path

import pytest


def _ran(name, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    line = json.dumps([name, start, time.monotonic()])
    with open(Path(os.environ["RAN_LOG"]), "a") as log:
        log.write(line + "\\n")
"""
QUIET = TIMED + "\n@pytest.mark.quiet_host\ndef test_quiet():\n    _ran('quiet', 1.0)\n"
BUSY = TIMED + "".join(f"\n\ndef test_busy_{n}():\n    _ran('busy{n}', 0.4)\n" for n in range(8))


def test_a_quiet_host_test_runs_alone_while_the_others_run_side_by_side(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(pytester.path, {"integration/test_a_quiet.py": QUIET, "integration/test_busy.py": BUSY})
    log = pytester.path / "ran.log"
    monkeypatch.setenv("RAN_LOG", str(log))
    result = pytester.runpytest_subprocess("tests", "-n", "2", "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=9)
    ran = {name: (start, end) for name, start, end in map(json.loads, log.read_text().splitlines())}
    quiet = ran.pop("quiet")
    assert all(end <= quiet[0] or start >= quiet[1] for start, end in ran.values()), (quiet, ran)
    # The others did run side by side, so the check above could have failed.
    spans = sorted(ran.values())
    assert any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans)), spans


NESTED = """
import subprocess, sys

import pytest


@pytest.mark.quiet_host
def test_quiet_runs_pytest():
    # As the nightly tests do: a pytest of this suite, started by a test that holds the host.
    run = subprocess.run([sys.executable, "-m", "pytest", "tests/integration/test_inner.py", "-q", "-p",
                          "no:cacheprovider"], timeout=60, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
"""


def test_a_pytest_started_by_a_quiet_host_test_does_not_wait_for_the_lock_its_test_holds(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _suite(
        pytester.path,
        {"integration/test_a_nested.py": NESTED, "integration/test_inner.py": PLAIN, "integration/test_busy.py": BUSY},
    )
    monkeypatch.setenv("RAN_LOG", str(pytester.path / "ran.log"))
    result = pytester.runpytest_subprocess("tests", "-n", "2", "-p", "no:cacheprovider", "-q", timeout=120)
    result.assert_outcomes(passed=10)
