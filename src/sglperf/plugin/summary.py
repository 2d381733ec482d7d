"""The run's end: a table of measurements (from xdist workers too), baseline changes, the report."""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sglperf.history import chosen
from sglperf.model.item_outcome import INTERRUPTED_PHASE, ItemOutcome, fit_reason
from sglperf.model.measurement import BaselineStatus, MeasurementRow
from sglperf.model.metrics import METRICS, MetricOutcome
from sglperf.model.numbers_source import NumbersSource
from sglperf.plugin.items import MEASUREMENT_PROPERTY, append_run_line
from sglperf.plugin.keys import LIVE_KEY
from sglperf.reporting import markdown
from sglperf.reporting.effects import effects_console
from sglperf.results.folder import LineKind, NoResults, ResultsError

INTERRUPTED_RUN = "(the run)"  # the outcome's node id when the run was cut between two items

# Columns of the terminal table: (metric, heading, scale, format).
COLUMNS = (
    ("decode_tok_s", 1.0, "12.1f"),
    ("ttft_s", 1.0, "9.3f"),
    ("itl_s", 1000.0, "8.2f"),
    ("accept_length", 1.0, "7.2f"),
)


class RunSummary:
    """Collects measurement rows and ends the run with the table and the report."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.rows: list[MeasurementRow] = []
        self.skip_reasons: list[str] = []
        self.nothing_refreshed: str | None = None
        self.failed = 0
        self.running: dict[str, float] = {}  # nodeid -> when it started; the controller's view, xdist's too
        self.finished = 0
        self.collected = 0
        self.session: pytest.Session | None = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected = len(session.items)

    @pytest.hookimpl(optionalhook=True)  # xdist's controller collects nothing itself: its workers say
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected = max(self.collected, len(ids))

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.running[nodeid] = time.monotonic()

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.running.pop(nodeid, None)
        self.finished += 1

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C or a CI cancel (SIGTERM) mid-run: each item cut off is written as an outcome, so the
        report, the verdicts and the history entry of what ran say the run was cut short, and where."""
        if hasattr(self.config, "workerinput") or not (self.running or self.finished):
            return  # a worker's own interrupt, or one before any item started: nothing ran to report
        how = str(excinfo.value) or "Ctrl-C"
        left = max(self.collected - self.finished - len(self.running), 0)
        so_far = f"after {self.finished} item(s) finished" + (f"; {left} not run" if left else "")
        now = time.monotonic()
        cut = [
            (nodeid, f"interrupted ({how}) while this item ran, {so_far}", now - started)
            for nodeid, started in self.running.items()
        ]
        for nodeid, reason, duration in cut or [(INTERRUPTED_RUN, f"interrupted ({how}) between items, {so_far}", 0.0)]:
            append_run_line(
                self.config, LineKind.OUTCOMES, ItemOutcome(nodeid, INTERRUPTED_PHASE, reason, duration).to_record()
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.rows += [
                MeasurementRow.model_validate_json(str(v))
                for k, v in report.user_properties
                if k == MEASUREMENT_PROPERTY
            ]
        if report.skipped and isinstance(report.longrepr, tuple):
            self.skip_reasons.append(str(report.longrepr[2]).removeprefix("Skipped: "))
        if report.failed and not hasattr(self.config, "workerinput"):
            self.failed += 1
            # Written now, by the one process that sees every item: a run cut short keeps what failed.
            # pytest's crash line holds the exception's own message, which a long traceback's text ends with.
            crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", None)
            outcome = ItemOutcome(
                report.nodeid,
                report.when or "call",
                fit_reason(report.longreprtext),
                report.duration,
                crash if isinstance(crash, str) else "",
            )
            append_run_line(self.config, LineKind.OUTCOMES, outcome.to_record())

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """A baseline refresh that refreshed nothing is a failure, not a green run: the person who asked
        for it would otherwise believe the baselines are new."""
        self.session = session  # its exit status, which a signal during the report sets
        if hasattr(self.config, "workerinput") or not self.config.getoption("update_baselines"):
            return
        if any(r.status is BaselineStatus.RECORDED for r in self.rows):
            return
        why = f"; skipped: {self.skip_reasons[0]}" if self.skip_reasons else ""
        if self.rows:
            measured = f"{len(self.rows)} measurement(s) ran, none recorded"
        else:
            measured = f"no measurement ran; {self.failed} item(s) failed" if self.failed else "no measurement ran"
        self.nothing_refreshed = f"sglperf: --update-baselines refreshed no baseline ({measured}{why})"
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        if self.nothing_refreshed:
            tr.write_line(self.nothing_refreshed, red=True)
        if self.rows:
            # A row carries no GPU count, so the table names the emulator only.
            source = NumbersSource.of_all(NumbersSource.of(emulated=r.emulated) for r in self.rows)
            tr.section("sglperf measurements" + source.words.caption)
            headings = [_heading(metric, scale, fmt) for metric, scale, fmt in COLUMNS]
            tr.write_line(f"{'item':44} {' '.join(headings)} {'rounds':>6} {'host':>5}  baseline")
            for row in sorted(self.rows, key=lambda r: r.key):
                tr.write_line(summary_line(row))
            changes = [c for r in self.rows for c in r.changes]
            if changes:
                tr.section("sglperf baseline changes")
                for line in changes:
                    tr.write_line(line)
        folder = self.config.stash[LIVE_KEY].options.results_dir
        if not hasattr(self.config, "workerinput") and folder.is_dir():
            held: list[int] = []
            try:
                # The run's one report: report.md, its plots and the effects below are all rendered from it.
                with _signals_held(held):
                    written = markdown.record_and_write(
                        folder.resolve(), chosen(self.config.getoption("history_store"))
                    )
            except NoResults:
                return  # nothing was checked, measured or failed in this run
            except ResultsError as exc:
                tr.write_line(f"sglperf report: not written: {exc}", red=True)
                return
            finally:
                if held:
                    names = ", ".join(dict.fromkeys(signal.Signals(n).name for n in held))
                    tr.write_line(f"sglperf: {names} while the report was written: finished it first", red=True)
                    if self.session is not None:
                        self.session.exitstatus = pytest.ExitCode.INTERRUPTED
            if written.report.effects:
                title, lines = effects_console(written.report)
                tr.section(title)
                for line in lines:
                    tr.write_line(line)
            for line in written.said:
                tr.write_line(line)
            tr.write_line(f"sglperf report: {written.path}")


def _heading(metric: str, scale: float, fmt: str) -> str:
    width = int(fmt.split(".", maxsplit=1)[0])
    label = METRICS[metric].label.replace(" s", " ms") if scale == 1000.0 else METRICS[metric].label
    return f"{label:>{width}}"


def summary_line(row: MeasurementRow) -> str:
    regressed = [k for k, v in row.outcomes.items() if v.fails]
    improved = [k for k, v in row.outcomes.items() if v is MetricOutcome.IMPROVEMENT]
    verdict = (
        f"REGRESSION: {', '.join(regressed)}"
        if regressed
        else f"improved: {', '.join(improved)} (refresh with --update-baselines)"
        if improved
        else row.status.value
    )
    cells = [format(row.medians.get(metric, math.nan) * scale, fmt) for metric, scale, fmt in COLUMNS]
    rounds = f"{row.rounds}/{row.rounds_budget}" if row.rounds is not None else "-"
    # What others took of the machine's CPU (median over the rounds): a busy neighbour, not SGLang.
    host = f"{row.host_share:.0%}" if row.host_share is not None and not math.isnan(row.host_share) else "-"
    if row.dropped_rounds:
        verdict += f"; {row.dropped_rounds} round(s) run again: host busy"
    if row.gpu_dropped_rounds:
        verdict += f"; {row.gpu_dropped_rounds} round(s) run again: GPU disturbed"
    return f"{row.key:44} {' '.join(cells)} {rounds:>6} {host:>5}  {verdict}"


@contextlib.contextmanager
def _signals_held(came: list[int]) -> Iterator[None]:
    """Ctrl-C and SIGTERM noted, not acted on, while the report is written: a CI cancel that follows a
    Ctrl-C (or lands at the run's end) would otherwise stop it halfway and the run would have no report.
    The signals that came are added to ``came``; the previous handlers come back after. (The files are
    written atomically: a run killed outright leaves the previous report, never half of one.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    for n in previous:
        signal.signal(n, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        for n, handler in previous.items():
            signal.signal(n, handler)
