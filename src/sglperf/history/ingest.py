"""A results folder (or an export line) as a run for the store, with its identity.

A folder stamped by its run (``run.json``) keeps that run's id and start time. A folder from before
run ids gets an id from a digest of its records, so importing it twice stores it once, and the time
of its earliest measurement (or, without one, the folder's modification time).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sglperf.history.records import RunIdentity, StoredRun
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.numbers_source import NumbersSource
from sglperf.model.verdict import Verdict
from sglperf.results.folder import ResultsError, RunResults, collect, identity_files


def stored_run(results: RunResults) -> StoredRun:
    return StoredRun(_identity(results), results.measurements, results.verdicts, results.sessions)


def from_folder(folder: Path) -> StoredRun:
    return stored_run(collect(folder))


def _joined(values: Iterable[str]) -> str:
    return ",".join(sorted({v for v in values if v}))


def _identity(results: RunResults) -> RunIdentity:
    provenances = [m.provenance for m in results.measurements]
    if results.stamp is not None:
        run_id, recorded_at = results.stamp.run_id, results.stamp.started_at
    else:
        run_id = f"folder-{_digest(results.folder)}"
        dates = sorted(p.date for p in provenances)
        recorded_at = dates[0] if dates else _mtime(results.folder)
    gpus = _joined(f"{p.gpu_count}x {p.gpu_names[0]}" for p in provenances if p.gpu_names)
    return RunIdentity(
        run_id=run_id,
        recorded_at=_utc(recorded_at, results.folder),  # run.json's start is checked when read
        runner=_joined(p.runner for p in provenances),
        gpus=gpus,
        sglang_version=_joined(
            [*(m.sglang_version for m in results.measurements), *(v.sglang_version for v in results.verdicts)]
        ),
        args_digest=_joined(p.effective_args_digest for p in provenances),
        deployment_commit=_joined(p.git_commit for p in provenances) or "unknown",
        emulated=results.numbers_source is NumbersSource.EMULATOR,
        source=str(results.folder.resolve()),
    )


def _utc(stamp: str, folder: Path) -> str:
    """ISO 8601 in UTC, so that stored times sort as text."""
    try:
        moment = _dt.datetime.fromisoformat(stamp)
    except ValueError:
        raise ResultsError(
            f"{folder}: its measurement date {stamp!r} is not an ISO 8601 time: "
            "fix or remove the record that carries it, then import again"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=_dt.UTC)
    return moment.astimezone(_dt.UTC).replace(microsecond=0).isoformat()


def _mtime(folder: Path) -> str:
    return _dt.datetime.fromtimestamp(folder.stat().st_mtime, _dt.UTC).isoformat()


def _digest(folder: Path) -> str:
    """Of the records in the folder, by name and content: the same folder, copied or moved, digests the same."""
    h = hashlib.sha256()
    for path in identity_files(folder):
        h.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def from_export_line(line: str, where: str) -> StoredRun:
    """One line of `sglperf history export` read back (``where``: file:line, for the message)."""
    try:
        data: dict[str, Any] = json.loads(line)
        ident = RunIdentity(**data["run"])
        measurements = tuple(MeasurementRecord.model_validate(m) for m in data["measurements"])
        verdicts = tuple(Verdict.from_record(v) for v in data["verdicts"])
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        raise ResultsError(f"{where}: not a line of `sglperf history export` ({type(exc).__name__}: {exc})") from None
    return StoredRun(ident, measurements, verdicts)
