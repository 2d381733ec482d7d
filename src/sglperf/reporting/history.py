"""A run in the light of the stored history: each measurement's medians per run, the drifts in them,
and since when each failing item fails.

Everything is read from the run-history store (`sglperf.history`), per series: one runner, emulator
or not, one measurement key (deployment x variant x workload x concurrency), one metric, ordered by
the runs' recorded time. The run itself is recorded first, so it is the series' last point. Drifts
come from `sglperf.baselines.changepoint` (E-divisive change points, seeded permutation tests) for
every metric with at least `changepoint.MIN_HISTORY` runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sglperf.baselines import changepoint
from sglperf.history import HistoryError, SqlHistoryStore
from sglperf.history.streaks import FailingStreak, failing_streak
from sglperf.results.folder import RunResults

Point = tuple[str, dict[str, float]]  # (run label, metric -> median)


@dataclass(frozen=True)
class RunHistory:
    points: dict[str, list[Point]] = field(default_factory=dict)  # measurement key -> oldest first
    drifts: dict[str, list[changepoint.Drift]] = field(default_factory=dict)
    streaks: dict[str, FailingStreak] = field(default_factory=dict)  # failing item -> its streak
    note: str | None = None  # why there is no history to read

    def drift_line(self, key: str) -> str | None:
        """Why a measurement's drift was not checked (too few runs stored); None when it was."""
        if self.note is not None:
            return None
        runs = len(self.points.get(key, ()))
        if runs >= changepoint.MIN_HISTORY:
            return None
        return f"Drift: not checked yet: {runs} run(s) of this series stored, {changepoint.MIN_HISTORY} needed"


def drifts_in(points: Sequence[Point]) -> list[changepoint.Drift]:
    """Every metric still drifting the worse way at the latest run."""
    found = []
    for metric in sorted({m for _, medians in points for m in medians}):
        series = [(label, medians[metric]) for label, medians in points if medians.get(metric, 0) > 0]
        if len(series) < changepoint.MIN_HISTORY:
            continue
        labels, values = zip(*series, strict=True)
        result = changepoint.drift(metric, values, labels)
        if result is not None:
            found.append(result)
    return found


def _points(store: SqlHistoryStore, key: str, runner: str, emulated: bool) -> list[Point]:
    runs: dict[str, tuple[str, str]] = {}  # run id -> (recorded at, label)
    medians: dict[str, dict[str, float]] = {}
    for metric in store.metrics_of(key, runner, emulated):
        for p in store.series(key, metric, runner, emulated):
            runs[p.run_id] = (p.recorded_at, p.label)
            medians.setdefault(p.run_id, {})[metric] = p.value
    return [(runs[r][1], medians[r]) for r in sorted(runs, key=lambda r: (runs[r][0], r))]


def read(run: RunResults, store: SqlHistoryStore | None, note: str | None = None) -> RunHistory:
    """The history of every measurement and failing item of ``run``; without a store, none (and why)."""
    if store is None:
        return RunHistory(note=note or "no history store (--history-store off)")
    try:
        points = {m.key: _points(store, m.key, m.provenance.runner, m.emulated) for m in run.measurements}
        streaks: dict[str, FailingStreak] = {}
        for m in run.measurements:
            if m.problems or any(c.outcome.fails for c in m.comparisons):
                found = failing_streak(m.key, store.measurement_outcomes(m.key, m.provenance.runner, m.emulated))
                if found is not None:
                    streaks[m.key] = found
        for v in run.verdicts:
            if v.status.failed:
                item = f"{v.test_id} ({v.tier})"
                found = failing_streak(item, store.verdict_outcomes(v.test_id, v.tier))
                if found is not None:
                    streaks[item] = found
    except HistoryError as exc:
        return RunHistory(note=str(exc))
    return RunHistory(points, {key: drifts_in(p) for key, p in points.items()}, streaks, note)
