"""A run that fails or is interrupted leaves its report: every failed item is written as it happens
(outcomes-main.jsonl), an item cut off by Ctrl-C or SIGTERM when the run stops; the report lists them
first and the run is recorded in the history store, even when no item wrote a verdict or measurement
record of its own (a measurement refused on a busy host used to leave nothing)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sglperf.results.folder import collect

pytest_plugins = ["pytester"]

FAILING = """
def test_refused():
    raise RuntimeError("host stayed busy: 5 of 5 rounds over the load limit (python3 at 97% of a CPU)")

def test_fine():
    pass
"""


def test_a_run_whose_items_failed_without_records_still_writes_its_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_night=FAILING)
    results = pytester.path / "results"
    store = pytester.path / "history.sqlite"
    run = pytester.runpytest_subprocess(
        f"--results-dir={results}", f"--history-store={store}", "-p", "no:cacheprovider", timeout=120
    )
    run.assert_outcomes(failed=1, passed=1)
    (line,) = (results / "outcomes-main.jsonl").read_text().splitlines()
    assert json.loads(line)["nodeid"] == "test_night.py::test_refused"
    (failed,) = collect(results).failed_items
    assert (
        failed.headline == "RuntimeError: host stayed busy: 5 of 5 rounds over the load limit (python3 at 97% of a CPU)"
    )
    report = (results / "report.md").read_text()
    assert "## Failed items (1)" in report and "`test_night.py::test_refused` (call," in report, report
    assert "sglperf history: run " in run.stdout.str() and store.is_file()


# A plugin's own item whose set-up raised (issue 53: the emulator's sizing error came out of sglperf's
# measurement item): pytest's long traceback of it starts in its own CallInfo.from_call, whose arguments
# it prints first (`cls = <class '_pytest.runner.CallInfo'>`), and ends, past the record's length, with
# the exception's message.
PLUGIN_ITEM_FAILS = """
import pytest


def size_the_weights(depth):
    if depth:
        return size_the_weights(depth - 1)
    raise ValueError("config.json: model_type 'gemma3' is not supported")


class Measurement(pytest.Item):
    def runtest(self):
        size_the_weights(30)


class Deployment(pytest.File):
    def collect(self):
        yield Measurement.from_parent(self, name="gemma-3-12b-it-defaults-decode-chat-c1")


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".toml":
        return Deployment.from_parent(parent, path=file_path)
"""


def test_the_report_gives_the_items_own_failure_line_not_a_traceback_frame(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(PLUGIN_ITEM_FAILS)
    (pytester.path / "gemma.toml").write_text("")
    results = pytester.path / "results"
    run = pytester.runpytest_subprocess(f"--results-dir={results}", "--history-store=off", "-p", "no:cacheprovider")
    run.assert_outcomes(failed=1)
    (failed,) = collect(results).failed_items
    assert failed.headline == "ValueError: config.json: model_type 'gemma3' is not supported", failed
    assert failed.reason.startswith("cls = <class '_pytest.runner.CallInfo'>")  # what the old line quoted
    report = (results / "report.md").read_text()
    assert "s): ValueError: config.json: model_type 'gemma3' is not supported\n" in report, report
    assert "cls = <class" not in report, report


INTERRUPTIBLE = """
import os, time
from pathlib import Path

def test_a_failed():
    raise AssertionError("decode tok/s 41.0 below the floor 63.0")

def test_b_slow():
    Path(os.environ["SGLPERF_TEST_STARTED"]).touch()
    time.sleep(120)

def test_c_never_reached():
    pass
"""


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGTERM-xdist"])
def test_an_interrupted_run_writes_its_report_with_what_it_had(pytester: pytest.Pytester, how: str) -> None:
    """Ctrl-C or a CI cancel mid-item: the report and the history entry keep what finished and name the
    item that was cut off, the signal and what was never run."""
    pytester.makepyfile(test_night=INTERRUPTIBLE)
    results, store = pytester.path / "results", pytester.path / "history.sqlite"
    started = pytester.path / "started"
    args = [sys.executable, "-m", "pytest", f"--results-dir={results}", f"--history-store={store}"]
    env = {**os.environ, "SGLPERF_TEST_STARTED": str(started)}
    if how.endswith("xdist"):
        args += ["-n", "1"]  # one worker takes the items in file order: a, then b is cut, c never runs
    with subprocess.Popen(
        [*args, "-p", "no:cacheprovider"],
        cwd=pytester.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the slow item never started"
            time.sleep(0.05)
        proc.send_signal(getattr(signal, how.removesuffix("-xdist")))
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    failed = {o.nodeid: o for o in collect(results).failed_items}
    assert set(failed) == {"test_night.py::test_a_failed", "test_night.py::test_b_slow"}, out
    cut = failed["test_night.py::test_b_slow"]
    shown = "Ctrl-C" if how == "SIGINT" else "SIGTERM"
    assert cut.phase == "interrupted"
    assert cut.headline == f"interrupted ({shown}) while this item ran, after 1 item(s) finished; 1 not run"
    report = (results / "report.md").read_text()
    assert "## Failed items (2)" in report and "`test_night.py::test_b_slow` (interrupted," in report, report
    assert f"**Run cut short**: {cut.headline} (`test_night.py::test_b_slow`)" in report.split("## Failed", 1)[0]
    assert "sglperf history: run " in out and store.is_file(), out


SLOW_REPORT = """
import os, time
from pathlib import Path

from sglperf.reporting import plots

_draw = plots.draw


def _slow_draw(report, out_dir):
    # The wrap-up made long enough for a signal to land in it: a report with many plots takes this long.
    Path(os.environ["SGLPERF_TEST_DRAWING"]).touch()
    time.sleep(3)
    return _draw(report, out_dir)


plots.draw = _slow_draw
"""


def test_a_second_signal_during_the_wrap_up_keeps_the_report(pytester: pytest.Pytester) -> None:
    """Issue 53's audit: SIGINT, then SIGTERM (a CI cancel) while the report was being written, lost
    report.md. The report is finished first, the run still ends as interrupted, and says so."""
    pytester.makepyfile(test_night=INTERRUPTIBLE)
    pytester.makeconftest(SLOW_REPORT)
    results, store = pytester.path / "results", pytester.path / "history.sqlite"
    started, drawing = pytester.path / "started", pytester.path / "drawing"
    args = [sys.executable, "-m", "pytest", f"--results-dir={results}", f"--history-store={store}"]
    env = {**os.environ, "SGLPERF_TEST_STARTED": str(started), "SGLPERF_TEST_DRAWING": str(drawing)}
    with subprocess.Popen(
        [*args, "-p", "no:cacheprovider"],
        cwd=pytester.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the slow item never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        while not drawing.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the report was never begun"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    report = (results / "report.md").read_text()
    assert "## Failed items (2)" in report and "**Run cut short**" in report, report
    assert "sglperf: SIGTERM while the report was written: finished it first" in out, out
    assert "Traceback" not in out, out
