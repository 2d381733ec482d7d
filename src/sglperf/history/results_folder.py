"""A results folder read back as records: the verdict lines and the measurement records a run wrote.

A run stamps its folder when it starts (``run.json``: its id and start time) and every verdict line
and measurement record it writes with that id. A folder reused by several runs therefore reads back
as its latest run only; a folder from before run ids (no ``run.json``) reads back whole.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from sglperf.errors import SglperfError
from sglperf.model.effective_config import CONFIGS_GLOB, EffectiveConfigRecord
from sglperf.model.files import SAFE_NAME_PATTERN, os_problem, read_input, strict_json, write_text_atomic
from sglperf.model.item_outcome import OUTCOMES_GLOB, ItemOutcome
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.verdict import Verdict

VERDICTS_GLOB = "verdicts*.jsonl"
MEASUREMENTS_DIR = "measurements"
RUN_FILE = "run.json"
RUN_ID_FIELD = "run_id"  # in each verdict line, beside the verdict record
T = TypeVar("T")


class ResultsError(SglperfError, ValueError):
    """A results folder that cannot be read; the message names the file."""


class NoResults(ResultsError):
    """A results folder in which no run wrote anything (nothing was checked, measured or failed)."""


@dataclass(frozen=True)
class RunStamp:
    """Which run a results folder holds."""

    run_id: str
    started_at: str  # UTC, ISO 8601

    @classmethod
    def new(cls, run_id: str | None = None) -> RunStamp:
        now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
        return cls(run_id or f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}", now.isoformat())

    def write(self, folder: Path) -> None:
        write_text_atomic(folder / RUN_FILE, strict_json({"run_id": self.run_id, "started_at": self.started_at}))

    def stamp(self, folder: Path) -> str | None:
        """Mark ``folder`` as this run's, unless it is already (each process writing results calls it).

        A stamp that cannot be read is not overwritten: it is renamed beside itself first, and what to
        tell the user about it is returned (None otherwise)."""
        said = None
        try:
            current = read_stamp(folder)
        except ResultsError as exc:
            current = None
            kept = folder / f"{RUN_FILE}.unreadable-{self.run_id}"
            for n in itertools.count(2):  # a run id set by the user (SGLPERF_RUN_ID) may come back
                if not kept.exists():
                    break
                kept = folder / f"{RUN_FILE}.unreadable-{self.run_id}-{n}"
            try:
                (folder / RUN_FILE).rename(kept)
                said = f"{exc}; kept as {kept}, and this run's stamp written in its place"
            except FileNotFoundError:
                pass  # another process of this run (an xdist worker) moved it first, and says so
        if current != self:
            self.write(folder)
        return said


def read_stamp(folder: Path) -> RunStamp | None:
    """The folder's run stamp; None for a folder written before run ids."""
    path = folder / RUN_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(read_input(path))
        stamp = RunStamp(str(data["run_id"]), str(data["started_at"]))
        _dt.datetime.fromisoformat(stamp.started_at)
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read it: {os_problem(exc)}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ResultsError(f"{path}: not a run stamp ({type(exc).__name__}: {exc})") from None
    if not re.fullmatch(SAFE_NAME_PATTERN, stamp.run_id):
        raise ResultsError(f"{path}: run_id {stamp.run_id[:80]!r} is not a safe name")
    return stamp


@dataclass(frozen=True)
class RunResults:
    folder: Path
    verdicts: tuple[Verdict, ...]
    measurements: tuple[MeasurementRecord, ...]
    stamp: RunStamp | None = None
    configs: tuple[EffectiveConfigRecord, ...] = ()  # each variant's whole effective config, per tier
    failed_items: tuple[ItemOutcome, ...] = ()  # every item that failed, with or without a record

    @property
    def emulated(self) -> bool:
        return any(m.emulated for m in self.measurements) or any("emulator" in v.tier for v in self.verdicts)


def _run_lines(folder: Path, glob: str, parse: Callable[[dict[str, Any]], T], what: str, run_id: str | None) -> list[T]:
    """The records of the JSON-line files ``glob`` names (a verdict, an effective config, a failed item:
    each beside the id of the run that wrote it, none before run ids); with ``run_id``, that run's only."""
    found = []
    for path, n, line in _lines(folder, glob):
        try:
            record = json.loads(line)
            written_by, parsed = record.get(RUN_ID_FIELD), parse(record)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ResultsError(f"{path}:{n}: not {what} record ({exc})") from None
        if run_id is None or written_by == run_id:
            found.append(parsed)
    return found


def _lines(folder: Path, glob: str) -> Iterator[tuple[Path, int, str]]:
    for path in sorted(folder.glob(glob)):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                yield path, n, line


def read_measurement(path: Path) -> MeasurementRecord:
    try:
        return MeasurementRecord.model_validate_json(read_input(path))
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read it: {os_problem(exc)}") from None
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise ResultsError(
            f"{path}: not a measurement record ({'.'.join(map(str, first['loc']))}: {first['msg']})"
        ) from None


def collect(folder: Path) -> RunResults:
    """Read what the folder's run wrote: verdict lines (one file per pytest process) and measurement
    records; with a run stamp, only those of that run."""
    stamp = read_stamp(folder)
    run_id = stamp.run_id if stamp else None
    verdicts = _run_lines(folder, VERDICTS_GLOB, Verdict.from_record, "a verdict", run_id)
    configs = _run_lines(folder, CONFIGS_GLOB, EffectiveConfigRecord.from_record, "an effective-config", run_id)
    failed = _run_lines(folder, OUTCOMES_GLOB, ItemOutcome.from_record, "an item outcome", run_id)
    records = [read_measurement(path) for path in sorted((folder / MEASUREMENTS_DIR).glob("*.json"))]
    measurements = [r for r in records if run_id is None or r.run_id == run_id]
    if not verdicts and not measurements and not failed:
        raise NoResults(f"{folder}: no sglperf results here (expected {VERDICTS_GLOB} or {MEASUREMENTS_DIR}/*.json)")
    return RunResults(folder, tuple(verdicts), tuple(measurements), stamp, tuple(configs), tuple(failed))
