"""A results folder: every file a run writes there, the measurement key, and the records read back.

One home for the folder's layout, so that the plugin and the sessions that write it and the history
ingest, the report and `sglperf compare` that read it cannot disagree on a name::

    run.json                        the run's stamp (`RunStamp`): its id and start time
    verdicts-<writer>.jsonl         one verdict per line
    configs-<writer>.jsonl          one variant's effective config per tier, per line
    outcomes-<writer>.jsonl         one failed or cut-off item per line
    measurements/<key>.json         one measurement record, key = `measurement_key`
    servers/<name>.log              a launched server's log
    servers/<name>.effective.json   the effective args the emulator serves
    progress.log                    the progress lines of every process
    .gpu-locks/                     an emulated run's locks on its simulated GPUs
    report.md, plots/*.png          the report, written at the run's end (or by `sglperf report`)

Each pytest process (<writer>: main, gw0, ...) appends to its own JSON-line files, so xdist workers never
interleave. A run stamps its folder when it starts (``run.json``: its id and start time) and every verdict line
and measurement record it writes with that id. A folder reused by several runs therefore reads back
as its latest run only; a folder from before run ids (no ``run.json``) reads back whole.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from sglperf.errors import SglperfError
from sglperf.model.effective_config import EffectiveConfigRecord
from sglperf.model.files import (
    SAFE_NAME_PATTERN,
    append_line_no_follow,
    os_problem,
    own_folder,
    read_input,
    strict_json,
    write_text_atomic,
)
from sglperf.model.item_outcome import ItemOutcome
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.numbers_source import NumbersSource
from sglperf.model.variant_effect import EffectSession
from sglperf.model.verdict import Verdict

RUN_FILE = "run.json"
RUN_ID_FIELD = "run_id"  # in each JSON line, beside its record
MEASUREMENTS_DIR = "measurements"
SERVERS_DIR = "servers"
PLOTS_DIR = "plots"
REPORT_NAME = "report.md"
PROGRESS_LOG = "progress.log"
BISECT_FILE = "bisect.json"  # a bisect's question and every comparison it measured (sglperf.upgrade.bisect)
GPU_LOCKS_DIR = ".gpu-locks"  # an emulated run's simulated GPUs, locked by its own processes only


class LineKind(str, Enum):
    """The JSON-line files of a folder, by the stem each writer's file starts with."""

    VERDICTS = "verdicts"
    CONFIGS = "configs"  # each variant's whole effective config, once per tier and release
    OUTCOMES = "outcomes"  # every item that failed or was cut off, written as it happens
    SESSIONS = "effect-sessions"  # a variant effect's counterbalanced sessions beyond the measurement items'

    @property
    def glob(self) -> str:
        return f"{self.value}*.jsonl"

    def file(self, folder: Path, writer: str) -> Path:
        """``writer``'s file of this kind: "main", or an xdist worker's id."""
        return folder / f"{self.value}-{writer}.jsonl"


VERDICTS_GLOB = LineKind.VERDICTS.glob


def measurement_path(folder: Path, key: str) -> Path:
    return folder / MEASUREMENTS_DIR / f"{key}.json"


def server_log_path(folder: Path, server: str) -> Path:
    return folder / SERVERS_DIR / f"{server}.log"


def server_effective_path(folder: Path, server: str) -> Path:
    return folder / SERVERS_DIR / f"{server}.effective.json"


def identity_files(folder: Path) -> list[Path]:
    """The files a folder without a run stamp is identified by: its verdict lines and measurement records
    (the files that existed when such folders were written, so their digest stays what it was)."""
    return sorted([*folder.glob(VERDICTS_GLOB), *(folder / MEASUREMENTS_DIR).glob("*.json")])


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
    sessions: tuple[EffectSession, ...] = ()  # variant effects' further sessions (counterbalanced)

    @property
    def numbers_source(self) -> NumbersSource:
        return run_numbers_source(self.measurements, self.verdicts)


def run_numbers_source(measurements: Iterable[MeasurementRecord], verdicts: Iterable[Verdict]) -> NumbersSource:
    """A run's source: its measurements', and the emulator's too when only its verdicts came from the
    emulator's live tier (a run that checked intents and measured nothing)."""
    emulated_tier = [NumbersSource.EMULATOR for v in verdicts if "emulator" in v.tier]
    return NumbersSource.of_all([*(m.numbers_source for m in measurements), *emulated_tier])


def append_line(folder: Path, kind: LineKind, writer: str, record: dict[str, Any], run: RunStamp | None) -> str | None:
    """One JSON line in ``writer``'s file of ``kind``, stamped with ``run``'s id (a reused folder reads back
    as its latest run); the folder is created and stamped first. Returns what `RunStamp.stamp` had to say."""
    folder.mkdir(parents=True, exist_ok=True)
    said = None
    if run is not None:
        said = run.stamp(folder)
        record[RUN_ID_FIELD] = run.run_id
    append_line_no_follow(kind.file(folder, writer), strict_json(record, sort_keys=True) + "\n")
    return said


def write_measurement(record: MeasurementRecord, result: dict[str, Any], folder: Path) -> Path:
    """The record in its file, atomically, with the meter's raw per-request record beside it under "result"
    (for people and tools: sglperf never reads it back). OSError when it cannot be written."""
    own_folder(folder, MEASUREMENTS_DIR)  # a link there is replaced: the record never lands elsewhere
    path = measurement_path(folder, record.key)
    written = {**record.model_dump(mode="json"), "result": result}
    write_text_atomic(path, strict_json(written, indent=1, sort_keys=True, default=str))
    return path


def _run_lines(folder: Path, glob: str, parse: Callable[[dict[str, Any]], T], what: str, run_id: str | None) -> list[T]:
    """The records of the JSON-line files ``glob`` names (a verdict, an effective config, a failed item:
    each beside the id of the run that wrote it, none before run ids); with ``run_id``, that run's only."""
    found = []
    for path, n, line in _lines(folder, glob):
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise TypeError(f"a JSON {type(record).__name__}, not an object")
            written_by, parsed = record.get(RUN_ID_FIELD), parse(record)
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            raise ResultsError(f"{path}:{n}: not {what} record ({type(exc).__name__}: {str(exc)[:200]})") from None
        if run_id is None or written_by == run_id:
            found.append(parsed)
    return found


def failed_items_of(folder: Path, run_id: str | None) -> dict[str, str]:
    """The items of run ``run_id`` that failed so far, by their name (a measurement's key): each one's
    headline. Empty when the folder's outcome lines cannot be read (they are reported where they are read)."""
    try:
        found = _run_lines(folder, LineKind.OUTCOMES.glob, ItemOutcome.from_record, "an item outcome", run_id)
    except ResultsError:
        return {}
    return {o.nodeid.rsplit("::", 1)[-1]: o.headline for o in found}


def _lines(folder: Path, glob: str) -> Iterator[tuple[Path, int, str]]:
    for path in sorted(folder.glob(glob)):
        try:
            text = read_input(path).decode("utf-8")
        except OSError as exc:  # a directory, a FIFO (which would block forever), a device, too large
            raise ResultsError(f"{path}: cannot read it: {os_problem(exc)}") from None
        except UnicodeDecodeError as exc:
            raise ResultsError(f"{path}: not UTF-8 text (byte {exc.start}): not a file sglperf wrote") from None
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                yield path, n, line


def read_measurement(path: Path) -> MeasurementRecord:
    try:
        return MeasurementRecord.model_validate_json(read_input(path))
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read it: {os_problem(exc)}") from None
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        # A key of the file's own choosing may hold a line break: escaped, the error stays one line.
        where = ".".join(map(str, first["loc"])).encode("unicode_escape").decode("ascii")
        raise ResultsError(f"{path}: not a measurement record ({where}: {first['msg']})") from None


def this_runs_measurement(folder: Path, key: str, run_id: str | None) -> MeasurementRecord | None:
    """The record of ``key`` when the run ``run_id`` wrote it (another xdist worker, say); None when it is
    missing, unreadable or another run's."""
    try:
        record = read_measurement(measurement_path(folder, key))
    except ResultsError:
        return None
    return record if record.run_id == run_id else None


def collect(folder: Path) -> RunResults:
    """Read what the folder's run wrote: verdict lines (one file per pytest process) and measurement
    records; with a run stamp, only those of that run."""
    stamp = read_stamp(folder)
    run_id = stamp.run_id if stamp else None
    verdicts = _run_lines(folder, LineKind.VERDICTS.glob, Verdict.from_record, "a verdict", run_id)
    configs = _run_lines(folder, LineKind.CONFIGS.glob, EffectiveConfigRecord.from_record, "an effective-config", run_id)
    failed = _run_lines(folder, LineKind.OUTCOMES.glob, ItemOutcome.from_record, "an item outcome", run_id)
    sessions = _run_lines(folder, LineKind.SESSIONS.glob, EffectSession.model_validate, "an effect session", run_id)
    records = [read_measurement(path) for path in sorted((folder / MEASUREMENTS_DIR).glob("*.json"))]
    measurements = [r for r in records if run_id is None or r.run_id == run_id]
    if not verdicts and not measurements and not failed:
        raise NoResults(f"{folder}: no sglperf results here (expected {VERDICTS_GLOB} or {MEASUREMENTS_DIR}/*.json)")
    return RunResults(
        folder, tuple(verdicts), tuple(measurements), stamp, tuple(configs), tuple(failed), tuple(sessions)
    )

