"""PNG plots for the run report: current samples against baseline samples, and metric history."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np

from sglperf.baselines.changepoint import Drift
from sglperf.baselines.variant_effects import variant_effects
from sglperf.history.results_folder import RunResults
from sglperf.model.files import confined
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.metrics import describe_change, unit_of
from sglperf.model.variant_effect import EffectVerdict, VariantEffect
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
        change = describe_change(metric, comparison.baseline_median, comparison.current_median) if comparison else None
        title = f"{metric}\n{outcome}" + (f", {change}" if change is not None else "")
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


EFFECT_COLOUR = {
    EffectVerdict.BETTER: "#1e8449",
    EffectVerdict.WORSE: "#c0392b",
    EffectVerdict.NO_EFFECT: "#555555",
    EffectVerdict.UNDECIDED: "#b9770e",
    EffectVerdict.NOT_JUDGED: "#aaaaaa",
}


def effects_figure(effects: Sequence[VariantEffect], path: Path, emulated: bool) -> Path:
    """A forest plot for one workload and load point: each variant's change per metric against the
    reference, its interval, and the metric's floor as a band around zero."""
    _agg()
    import matplotlib.pyplot as plt

    rows = sorted(effects, key=lambda e: (e.variant, e.metric))
    fig, ax = plt.subplots(figsize=(8.0, 1.6 + 0.42 * len(rows)))
    for y, e in enumerate(rows):
        ax.fill_between([-e.floor * 100, e.floor * 100], y - 0.4, y + 0.4, color="#d6eaf8", linewidth=0)
        if e.verdict is EffectVerdict.NOT_JUDGED:
            continue
        colour = EFFECT_COLOUR[e.verdict]
        low, high = (e.ci_low - 1) * 100, (e.ci_high - 1) * 100
        ax.hlines(y, low, high, color=colour, linewidth=2.2)
        marker = "X" if e.expectation_met is False else "o"
        ax.plot([(e.ratio - 1) * 100], [y], marker=marker, color=colour, markersize=7)
    ax.axvline(0, color="black", linewidth=0.8)
    labels = [
        f"{e.variant}: {e.metric} ({e.verdict.value})"
        + (f"\nEXPECTED {e.expected}: not detected" if e.expectation_met is False else "")
        for e in rows
    ]
    ax.set_yticks(range(len(rows)), labels, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("change of the median vs the reference, % (bars: interval; shaded: the floor)")
    ax.grid(axis="x", alpha=0.3)
    first = rows[0] if rows else None
    where = f"{first.deployment}: {first.workload}@{first.load}, against {first.reference}" if first else ""
    tag = "\n[EMULATOR: test double, not GPU results]" if emulated else ""
    ax.set_title(f"Variant effects, {where}{tag}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def effect_plot_name(effect: VariantEffect) -> str:
    return f"effects-{effect.deployment}-{effect.workload}-{effect.load}"


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
    effects = sorted(variant_effects(run.measurements), key=effect_plot_name)
    for name, group in groupby(effects, key=effect_plot_name):
        made[name] = [effects_figure(list(group), confined(out_dir, f"{name}.png"), run.emulated)]
    return made
