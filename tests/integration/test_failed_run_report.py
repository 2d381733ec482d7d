"""A run that fails leaves its report: every failed item is written as it happens (outcomes-main.jsonl),
the report lists them first and the run is recorded in the history store, even when no item wrote a
verdict or measurement record of its own (a measurement refused on a busy host used to leave nothing)."""

from __future__ import annotations

import json

import pytest

from sglperf.history.results_folder import collect

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
