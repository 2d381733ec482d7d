"""PNG plots for the run report: current samples against baseline samples, and metric history."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sglperf.baselines.changepoint import Drift
from sglperf.history.results_folder import RunResults
from sglperf.model.files import confined
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.metrics import unit_of
from sglperf.reporting.history import Point, RunHistory


def _agg() -> None:
    """matplotlib without a display (runners have none). pyplot is imported where a figure is drawn:
    at module level it cost every pytest start 0.38 s (`python -X importtime -c "import sglperf.plugin"`),
    drawn or not."""
    import matplotlib

    matplotlib.use("Agg")


OUTCOME_COLOUR = {"regression": "#c0392b", "improvement": "#1e8449", "unchanged": "#555555", "insufficient": "#b9770e"}


def _strip(ax: Any, x: float, values: Sequence[float], colour: str, rng: np.random.Generator) -> None:
    if not values:
        return
    jitter = rng.uniform(-0.12, 0.12, len(values))
    ax.scatter(np.full(len(values), x) + jitter, values, s=14, alpha=0.7, color=colour)
    ax.hlines(float(np.median(values)), x - 0.25, x + 0.25, color=colour, linewidth=2.5)


def samples_figure(record: MeasurementRecord, path: Path) -> Path:
    _agg()
    import matplotlib.pyplot as plt

    metrics = sorted(record.samples)
    comparisons = {c.metric: c for c in record.comparisons}
    baseline = record.baseline_samples
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(3.2 * max(1, len(metrics)), 3.6), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, metric in zip(axes[0], metrics):
        comparison = comparisons.get(metric)
        outcome = comparison.outcome.value if comparison else "no baseline"
        _strip(ax, 0, baseline.get(metric, []), "#2e86c1", rng)
        _strip(ax, 1, record.samples[metric], OUTCOME_COLOUR.get(outcome, "#555555"), rng)
        ax.set_xticks([0, 1], ["baseline", "current"])
        ax.set_xlim(-0.6, 1.6)
        change = comparison.change if comparison else None
        title = f"{metric}\n{outcome}" + (f" ({change * 100:+.1f}%)" if change is not None else "")
        ax.set_title(title, fontsize=10, color=OUTCOME_COLOUR.get(outcome, "black"))
        ax.set_ylabel(unit_of(metric))
        ax.grid(axis="y", alpha=0.3)
    tag = " [EMULATOR: test double, not GPU results]" if record.emulated else ""
    fig.suptitle(f"{record.deployment} / {record.variant} / {record.workload} {record.load.tag}{tag}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def history_figure(key: str, points: Sequence[Point], path: Path, emulated: bool, drifts: Sequence[Drift] = ()) -> Path:
    """Each metric's median per night; a drift still going on is marked from the night it started."""
    _agg()
    import matplotlib.pyplot as plt

    metrics = sorted({m for _, medians in points for m in medians})
    drifting = {d.metric: d for d in drifts}
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.4 * len(metrics), 3.4), squeeze=False)
    labels = [run for run, _ in points]
    for ax, metric in zip(axes[0], metrics):
        xs = [i for i, (_, medians) in enumerate(points) if metric in medians]
        ax.plot(xs, [points[i][1][metric] for i in xs], marker="o", color="#2e86c1")
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=6)
        title = f"{metric} (median)"
        if metric in drifting:
            d = drifting[metric]
            ax.axvline(d.start - 0.5, color="#c0392b", linestyle="--", linewidth=1.2)
            ax.axvspan(d.start - 0.5, len(labels) - 0.5, color="#c0392b", alpha=0.08)
            title += f"\ndrifting since {d.start_label} ({d.change:+.1%})"
        ax.set_title(title, fontsize=10, color="#c0392b" if metric in drifting else "black")
        ax.set_ylabel(unit_of(metric))
        ax.grid(alpha=0.3)
    fig.suptitle(f"history: {key}" + (" [EMULATOR]" if emulated else ""), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw(run: RunResults, out_dir: Path, past: RunHistory | None = None) -> dict[str, list[Path]]:
    """All plots of a run; a history figure for each measurement with two runs or more in ``past``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, list[Path]] = {}
    for record in run.measurements:
        key = record.key
        made[key] = [samples_figure(record, confined(out_dir, f"{key}-samples.png"))]
        points = past.points.get(key, []) if past else []
        if len(points) >= 2:
            path = confined(out_dir, f"{key}-history.png")
            drifts = past.drifts.get(key, []) if past else []
            made[key].append(history_figure(key, points, path, record.emulated, drifts))
    return made
