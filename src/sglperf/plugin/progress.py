"""Progress lines that reach the person watching while a test runs, and the run's log.

pytest captures output during a test, and xdist workers have no terminal of their own, so a plain
print would show only inside a failure report. Each line is written with capturing suspended, to
the terminal reporter in the main process and to standard error in an xdist worker (workers inherit
the controller's stderr), and appended to `<results>/progress.log`.
"""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path

import pytest

from sglperf.plugin.keys import xdist_worker
from sglperf.results.folder import PROGRESS_LOG

PREFIX = "[sglperf]"


class LiveProgress:
    def __init__(self, config: pytest.Config, results_dir: Path):
        self.config = config
        self.log_path = results_dir / PROGRESS_LOG
        self.worker = xdist_worker(config)

    def __call__(self, message: str) -> None:
        line = f"{PREFIX} {message}" if self.worker is None else f"{PREFIX} [{self.worker}] {message}"
        self._log(line)
        capture = self.config.pluginmanager.getplugin("capturemanager")
        if capture is None:
            self._show(line)
            return
        with capture.global_and_fixture_disabled():
            self._show(line)

    def _show(self, line: str) -> None:
        # Looked up per call: the terminal reporter does not exist yet while plugins configure.
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and self.worker is None:
            reporter.ensure_newline()
            reporter.write_line(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def _log(self, line: str) -> None:
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a", encoding="utf-8") as fh:
                fh.write(f"{stamp} {line}\n")
        except OSError:
            pass  # the terminal line still goes out; a read-only results folder fails elsewhere, clearly
