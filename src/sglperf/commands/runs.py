"""Commands that read what runs left: the report of a results folder, the history store (import, export,
list) and the comparison of two runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sglperf import history
from sglperf.commands import UsageError
from sglperf.history import ingest
from sglperf.history.records import StoredRun
from sglperf.model.files import os_problem, read_input
from sglperf.model.progress import Progress, silent
from sglperf.reporting import markdown
from sglperf.results.folder import ResultsError


def write_report(folder: Path, location: str | None) -> markdown.WrittenReport:
    """Record a results folder in the history store (``location``: --history-store), then (re)build its
    report.md and plots."""
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such results folder (give the --results-dir of a run)")
    return markdown.record_and_write(folder.resolve(), history.chosen(location))


def open_store(location: str | None) -> history.SqlHistoryStore:
    """The history store, which this command needs on."""
    store = history.open_store(history.chosen(location))
    if store is None:
        raise UsageError(
            f"the history store is off (--history-store / {history.HISTORY_ENV}): there is nothing to read or add"
        )
    return store


def runs_in(path: Path) -> list[StoredRun]:
    """A results folder's run, or every run of a file of `sglperf history export` lines."""
    if path.is_dir():
        return [ingest.from_folder(path)]
    try:
        text = read_input(path).decode()
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read it: {os_problem(exc)}") from None
    except UnicodeDecodeError as exc:
        raise ResultsError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}): give a file of `sglperf history export`"
        ) from None
    return [ingest.from_export_line(line, f"{path}:{n}") for n, line in enumerate(text.splitlines(), 1) if line.strip()]


@dataclass(frozen=True)
class Imported:
    run: StoredRun
    given: str  # the folder or file it came from
    added: bool  # False: the store had it already, and kept it as it was


def import_runs(
    store: history.SqlHistoryStore, paths: Sequence[str], progress: Progress = silent
) -> tuple[list[Imported], int]:
    """Every run of the given folders and export files added to the store; a path that cannot be read is
    said and skipped. Returns what was imported and how many paths were skipped."""
    if not paths:
        raise UsageError("sglperf history import RESULTS_DIR... (results folders, or files of `history export`)")
    imported, skipped = [], 0
    for given in paths:
        try:
            runs = runs_in(Path(given))
        except ResultsError as exc:
            progress(f"sglperf history: {exc}; skipped")
            skipped += 1
            continue
        imported += [Imported(run, given, store.add_run(run)) for run in runs]
    return imported, skipped


def load_runs(given: Sequence[str], location: str | None) -> list[StoredRun]:
    """Each run named: a results folder, or a run id in the history store (opened only when one is named)."""
    store: history.SqlHistoryStore | None = None
    runs = []
    try:
        for name in given:
            if Path(name).is_dir():
                runs.append(ingest.from_folder(Path(name)))
                continue
            store = store or open_store(location)
            found = store.run(name)
            if found is None:
                raise UsageError(f"{name}: neither a results folder nor a run id in {store.backend.where}")
            runs.append(found)
    finally:
        if store is not None:
            store.close()
    return runs
