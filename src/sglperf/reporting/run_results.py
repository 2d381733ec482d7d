"""A results folder read back as records: the verdict lines and the measurement records a run wrote."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sglperf.model.files import os_problem, read_input
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.verdict import Verdict

VERDICTS_GLOB = "verdicts*.jsonl"
MEASUREMENTS_DIR = "measurements"


class ResultsError(ValueError):
    """A results folder that cannot be read; the message names the file."""


@dataclass(frozen=True)
class RunResults:
    folder: Path
    verdicts: tuple[Verdict, ...]
    measurements: tuple[MeasurementRecord, ...]

    @property
    def emulated(self) -> bool:
        return any(m.emulated for m in self.measurements) or any("emulator" in v.tier for v in self.verdicts)


def _verdict(path: Path, n: int, line: str) -> Verdict:
    try:
        return Verdict.from_record(json.loads(line))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ResultsError(f"{path}:{n}: not a verdict record ({exc})") from None


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
    """Read what a run wrote: verdict lines (one file per pytest process) and measurement records."""
    verdicts = [
        _verdict(path, n, line)
        for path in sorted(folder.glob(VERDICTS_GLOB))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if line.strip()
    ]
    measurements = [read_measurement(path) for path in sorted((folder / MEASUREMENTS_DIR).glob("*.json"))]
    if not verdicts and not measurements:
        raise ResultsError(f"{folder}: no sglperf results here (expected {VERDICTS_GLOB} or {MEASUREMENTS_DIR}/*.json)")
    return RunResults(folder, tuple(verdicts), tuple(measurements))


def history_dirs(folder: Path) -> list[Path]:
    """Earlier results folders next to this one (the nights before), oldest first, as absolute paths."""
    here = folder.resolve()
    return sorted(p for p in here.parent.iterdir() if p.is_dir() and p != here and (p / MEASUREMENTS_DIR).is_dir())
