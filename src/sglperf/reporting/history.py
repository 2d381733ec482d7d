"""A measurement's history across results folders (one per night), and the drifts in it.

Each results folder next to this run's is one night; a key's history is its per-metric medians in
folder-name order (the nightly folders are named by date). Drifts come from
`sglperf.baselines.changepoint` (E-divisive change points, seeded permutation tests), for every
metric with at least `changepoint.MIN_HISTORY` nights.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sglperf.baselines import changepoint
from sglperf.reporting.run_results import MEASUREMENTS_DIR, ResultsError, RunResults, read_measurement

Point = tuple[str, dict[str, float]]  # (folder name, metric -> median)


def history(key: str, folders: Sequence[Path]) -> list[Point]:
    points = []
    for folder in sorted(folders, key=lambda p: p.name):
        try:
            record = read_measurement(folder / MEASUREMENTS_DIR / f"{key}.json")
        except (OSError, ResultsError):
            continue  # a night without this item, or a record an older sglperf wrote
        points.append((folder.name, record.medians))
    return points


def drifts_in(points: Sequence[Point]) -> list[changepoint.Drift]:
    """Every metric still drifting the worse way at the latest night."""
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


def histories(run: RunResults, earlier: Sequence[Path]) -> dict[str, list[Point]]:
    """Every measurement key of the run: its history, this run included."""
    return {record.key: history(record.key, [*earlier, run.folder]) for record in run.measurements}
