"""A capacity search across one session: each rate's measurement, where the search stops, and the verdict.

Each rate of a capacity workload is its own measurement item (`...-r2`), measured lowest first; this
keeps their records so that a rate above one that missed the SLO is not measured (the search's time
stays bounded) and the capacity item (`...-capacity`) can judge the whole ladder against the
baseline's, with the statistics of `sglperf.baselines.capacity`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sglperf.baselines import capacity, store
from sglperf.errors import SglperfError
from sglperf.model.measurement import BaselineStatus, MeasurementRecord
from sglperf.model.metrics import GOODPUT_SHARE
from sglperf.model.workload import LoadPoint, Workload

SearchKey = tuple[str, str, str]  # deployment key, variant id, workload id


@dataclass(frozen=True)
class CapacityReport:
    """What the ladder measured in this session shows, against the baseline's when every step had one."""

    key: str
    current: capacity.Ladder
    baseline: capacity.Ladder | None  # None: recording, or a rate without a comparable baseline
    comparison: capacity.CapacityComparison | None
    missing: tuple[float, ...]  # rates the search needed but this session did not measure
    not_searched: tuple[float, ...]  # rates above the first miss
    emulated: bool
    why_no_baseline: str = ""

    def lines(self) -> list[str]:
        lines = list(self.comparison.lines) if self.comparison else [f"capacity {self.current.describe()}"]
        if self.baseline is None and self.why_no_baseline:
            lines.append(f"not compared: {self.why_no_baseline}")
        lines += [step.describe() for step in self.current.steps]
        if self.not_searched:
            lines.append(f"not measured (above the first miss): {', '.join(f'{r:g}' for r in self.not_searched)} req/s")
        return lines


class CapacitySearch:
    """The records of every capacity workload's rates measured in this session."""

    def __init__(self) -> None:
        self._records: dict[SearchKey, dict[float, MeasurementRecord]] = {}

    def why_not_measured(self, key: SearchKey, workload: Workload, rate: float) -> str | None:
        """Why this rate is skipped: a lower rate already missed the SLO (None: measure it)."""
        assert workload.capacity is not None
        stop = capacity.stop_above(self._steps(key, workload.capacity.goodput, below=rate))
        if stop is None:
            return None
        return f"{workload.id}: the capacity search stopped below {rate:g} req/s: {stop.describe()}"

    def add(self, key: SearchKey, rate: float, record: MeasurementRecord) -> None:
        self._records.setdefault(key, {})[rate] = record

    def report(self, key: SearchKey, workload: Workload) -> CapacityReport:
        assert workload.capacity is not None
        target, records = workload.capacity.goodput, self._records.get(key, {})
        current = capacity.ladder(self._steps(key, target))
        stop = capacity.stop_above(current.steps)
        rates = workload.capacity.rates
        not_searched = tuple(r for r in rates if stop is not None and r > stop.rate)
        missing = tuple(r for r in rates if r not in records and r not in not_searched)
        name = "-".join(key)
        emulated = any(r.emulated for r in records.values())
        compared = [r for r in records.values() if r.baseline_status is BaselineStatus.COMPARED]
        if not records or len(compared) < len(records):
            why = (
                "recording the baseline"
                if any(r.baseline_status is BaselineStatus.RECORDED for r in records.values())
                else "a rate has no comparable baseline (see its measurement item)"
            )
            return CapacityReport(name, current, None, None, missing, not_searched, emulated, why)
        steps = [
            capacity.RateStep(rate, tuple(r.baseline_samples.get(GOODPUT_SHARE, ())), target)
            for rate, r in records.items()
        ]
        # The rates above the first miss were not measured now, but the baseline may hold them: its
        # capacity is then what it says, not the highest rate this run reached.
        stored = _stored_steps(Path(compared[0].baseline), workload, not_searched)
        baseline = capacity.ladder([*steps, *stored])
        return CapacityReport(
            name, current, baseline, capacity.compare(current, baseline), missing, not_searched, emulated
        )

    def _steps(self, key: SearchKey, target: float, below: float | None = None) -> list[capacity.RateStep]:
        return [
            capacity.RateStep(rate, tuple(record.samples.get(GOODPUT_SHARE, ())), target)
            for rate, record in self._records.get(key, {}).items()
            if below is None or rate < below
        ]


def _stored_steps(path: Path, workload: Workload, rates: tuple[float, ...]) -> list[capacity.RateStep]:
    """The baseline file's steps at ``rates``, where it holds an entry sent on the same schedule."""
    assert workload.capacity is not None
    if not rates:
        return []
    try:
        entries = store.load(path).entries
    except SglperfError:
        return []  # the measured rates' comparisons already said what is wrong with the file
    steps = []
    for rate in rates:
        entry = entries.get(store.entry_key(workload.id, None, rate))
        at_rate = workload.at(LoadPoint(workload.max_concurrency, rate))
        if entry is not None and entry.schedule == at_rate.schedule() and GOODPUT_SHARE in entry.samples:
            steps.append(capacity.RateStep(rate, tuple(entry.samples[GOODPUT_SHARE]), workload.capacity.goodput))
    return steps
