"""PNG plots for the run report: current samples against baseline samples, and metric history."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np

from sglperf.baselines.changepoint import Drift
from sglperf.model.files import confined, write_bytes_atomic
from sglperf.model.measurement import MeasurementRecord, MetricComparison
from sglperf.model.metrics import METRICS, Direction, describe_change, unit_of
from sglperf.model.numbers_source import NumbersSource
from sglperf.model.variant_effect import EffectVerdict, VariantEffect
from sglperf.reporting.history import Point
from sglperf.reporting.run_report import RunReport


def _agg() -> None:
    """matplotlib without a display (runners have none). pyplot is imported where a figure is drawn:
    at module level it cost every pytest start 0.38 s (`python -X importtime -c "import sglperf.plugin"`),
    drawn or not."""
    import matplotlib

    matplotlib.use("Agg")


OUTCOME_COLOUR = {"regression": "#c0392b", "improvement": "#1e8449", "unchanged": "#555555", "insufficient": "#b9770e"}
# The pass/fail word beside a samples panel's title: INSUFFICIENT never counts as a pass (MetricOutcome.fails).
OUTCOME_MARK = {"regression": "FAIL", "insufficient": "FAIL", "unchanged": "ok", "improvement": "better"}
BASELINE_COLOUR = "#2e86c1"
BAND_COLOUR = "#d6eaf8"
BEYOND_FLOOR_WORSE = "beyond the floor, worse"
BEYOND_FLOOR_BETTER = "beyond the floor, better"
BEYOND_STYLE: dict[str, dict[str, Any]] = {
    BEYOND_FLOOR_WORSE: {"marker": "X", "markersize": 9, "color": OUTCOME_COLOUR["regression"]},
    BEYOND_FLOOR_BETTER: {"marker": "^", "markersize": 8, "color": OUTCOME_COLOUR["improvement"]},
}
BASELINE_LINE: dict[str, Any] = {"color": BASELINE_COLOUR, "linestyle": "--", "linewidth": 1.2}
# A panel of 4.2 x 3.2 in at 110 dpi: three to a row are 1386 px, what a laptop's markdown viewer shows
# whole (issue 41: six panels in one row were a 2112 x 396 px strip).
PANEL_WIDTH, PANEL_HEIGHT, DPI = 4.2, 3.2, 110
MIN_WIDTH = 6.0  # room for the figure's title above one or two panels
DEFAULT_FLOOR = 0.05  # for a metric the table does not know
MAX_DATE_TICKS = 8


def _grid(panels: int) -> tuple[int, int]:
    """(rows, columns): two to a row up to four panels, then three."""
    columns = 1 if panels <= 1 else 2 if panels <= 4 else 3
    return max(1, math.ceil(panels / columns)), columns


def _panels(plt: Any, panels: int, title: str) -> tuple[Any, list[Any]]:
    rows, columns = _grid(panels)
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(max(MIN_WIDTH, PANEL_WIDTH * columns), PANEL_HEIGHT * rows + 0.9),
        squeeze=False,
        layout="constrained",
    )
    flat = list(axes.flat)
    for spare in flat[panels:]:
        fig.delaxes(spare)
    fig.suptitle(title, fontsize=11)
    return fig, flat[:panels]


def _save(plt: Any, fig: Any, path: Path, handles: Sequence[Any]) -> Path:
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize=8, frameon=False)
    return _write(plt, fig, path, DPI)


def _write(plt: Any, fig: Any, path: Path, dpi: int) -> Path:
    """The figure as a PNG at ``path``, replacing whatever is there (a link too: never drawn through)."""
    png = io.BytesIO()
    fig.savefig(png, dpi=dpi, format="png")
    plt.close(fig)
    write_bytes_atomic(path, png.getvalue(), fsync=False)
    return path


def _floor(metric: str, record: MeasurementRecord, comparison: MetricComparison | None) -> float:
    """The relative floor a change of ``metric`` must pass to count: the comparison's own, else the
    workload's, else the metric table's."""
    if comparison is not None:
        return comparison.threshold
    known = METRICS.get(metric)
    return record.floors.get(metric, known.default_threshold if known else DEFAULT_FLOOR)


def _band(metric: str, baseline: float, floor: float) -> tuple[float, float]:
    """The values no verdict counts as a change of ``baseline``: the floor on the worse side and its
    mirror in log space on the better side, as `baselines.stats` decides."""
    direction = METRICS[metric].direction if metric in METRICS else None
    if direction is Direction.LOWER_IS_BETTER:
        return baseline / (1 + floor), baseline * (1 + floor)
    if direction is Direction.HIGHER_IS_BETTER and floor < 1:
        return baseline * (1 - floor), baseline / (1 - floor)
    return baseline * (1 - floor), baseline * (1 + floor)


def _draw_baseline(ax: Any, comparison: MetricComparison) -> tuple[float, float]:
    low, high = _band(comparison.metric, comparison.baseline_median, comparison.threshold)
    ax.axhspan(low, high, color=BAND_COLOUR, alpha=0.8, linewidth=0, zorder=0)
    ax.axhline(comparison.baseline_median, zorder=1, **BASELINE_LINE)
    return low, high


def _keep_scale(ax: Any, metric: str, values: Sequence[float], floor: float) -> None:
    """A y range of at least the floor band around the data's centre: autoscaled, a 0.16% move of a
    quiet metric fills the panel and reads as a collapse. The band's own shape (its better side mirrored
    in log space) keeps a latency's axis above zero where a symmetric one went negative: the CPU tier's
    250% floor put e2e_s on an axis from -0.3 s."""
    finite = [v for v in values if math.isfinite(v)]  # a damaged record's inf is drawn at the edge, not scaled to
    if not finite:
        return
    low, high = ax.get_ylim()
    centre = (min(finite) + max(finite)) / 2
    band_low, band_high = sorted(_band(metric, centre, floor))
    if math.isfinite(band_low) and math.isfinite(band_high):
        low, high = min(low, band_low), max(high, band_high)
    if min(finite) >= 0:
        low = max(low, 0.0)
    if high > low and math.isfinite(low) and math.isfinite(high):
        ax.set_ylim(low, high)
    ax.ticklabel_format(axis="y", useOffset=False)


def _legend_handles(lines: Sequence[tuple[str, dict[str, Any]]], band: bool) -> list[Any]:
    """Legend entries for ``lines`` (label, Line2D style), then the floor band's when one is drawn."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [Line2D([], [], label=label, **style) for label, style in lines]
    if band:
        handles.append(Patch(color=BAND_COLOUR, label="floor band: a change inside it does not count"))
    return handles


def _strip(ax: Any, x: float, values: Sequence[float], colour: str, rng: np.random.Generator) -> None:
    if not values:
        return
    jitter = rng.uniform(-0.12, 0.12, len(values))
    ax.scatter(np.full(len(values), x) + jitter, values, s=14, alpha=0.7, color=colour)
    ax.hlines(float(np.median(values)), x - 0.25, x + 0.25, color=colour, linewidth=2.5)


def samples_figure(record: MeasurementRecord, path: Path) -> Path:
    """Per metric, the baseline's and this run's samples, the baseline median and the band a change must
    leave to count, and the verdict: FAIL, ok or better."""
    _agg()
    import matplotlib.pyplot as plt

    metrics = sorted(record.samples)
    comparisons = {c.metric: c for c in record.comparisons}
    baseline = record.baseline_samples
    tag = record.numbers_source.words.figure_line
    fig, axes = _panels(
        plt, len(metrics), f"{record.deployment} / {record.variant} / {record.workload} {record.load.tag}{tag}"
    )
    rng = np.random.default_rng(0)
    for ax, metric in zip(axes, metrics):
        comparison = comparisons.get(metric)
        outcome = comparison.outcome.value if comparison else "no baseline"
        colour = OUTCOME_COLOUR.get(outcome, "#555555")
        if comparison is not None:
            _draw_baseline(ax, comparison)
        _strip(ax, 0, baseline.get(metric, []), BASELINE_COLOUR, rng)
        _strip(ax, 1, record.samples[metric], colour, rng)
        ax.set_xticks([0, 1], ["baseline", "current"])
        ax.set_xlim(-0.6, 1.6)
        change = describe_change(metric, comparison.baseline_median, comparison.current_median) if comparison else None
        ax.set_title(f"{metric}\n{outcome}" + (f", {change}" if change is not None else ""), fontsize=10, color=colour)
        ax.set_title(OUTCOME_MARK.get(outcome, ""), loc="left", fontsize=11, fontweight="bold", color=colour)
        if comparison is not None and comparison.outcome.fails:
            for spine in ax.spines.values():
                spine.set_color(colour)
                spine.set_linewidth(1.6)
        ax.set_ylabel(unit_of(metric))
        ax.grid(axis="y", alpha=0.3)
        shown = [*baseline.get(metric, []), *record.samples[metric]]
        _keep_scale(ax, metric, shown, _floor(metric, record, comparison))
    if not record.comparisons:
        return _save(plt, fig, path, [])
    return _save(plt, fig, path, _legend_handles([("baseline median", BASELINE_LINE)], band=True))


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


_LABEL = re.compile(r"(\d{4})-(\d{2})-(\d{2})[ T](\d{2}:\d{2})")


def _short_labels(labels: Sequence[str]) -> list[str]:
    """Run labels ("2026-01-05 03:00 (20260105T030000Z-ab12cd34)") as short dates: "Jan 05", with the
    time where two runs share a day, with the year where the runs span two; a label of another form is
    cut to 12 characters."""
    parsed = [_LABEL.match(label) for label in labels]
    if not all(parsed):
        return [label[:12] for label in labels]
    found = [m for m in parsed if m is not None]
    days = [m.group(1, 2, 3) for m in found]
    with_time = len(set(days)) < len(days)
    with_year = len({d[0] for d in days}) > 1
    short = []
    for m in found:
        year, month, day, time = m.groups()
        date = f"{year}-{month}-{day}" if with_year else f"{_MONTHS[int(month) - 1]} {day}"
        short.append(f"{date} {time}" if with_time and not with_year else date)
    return short


def _date_ticks(count: int) -> list[int]:
    """At most MAX_DATE_TICKS run indices, evenly spaced back from the last (this run)."""
    step = max(1, math.ceil(count / MAX_DATE_TICKS))
    return list(range(count - 1, -1, -step))[::-1]


def _beyond(metric: str, value: float, band: tuple[float, float]) -> str | None:
    direction = METRICS[metric].direction if metric in METRICS else None
    if direction is None or band[0] <= value <= band[1]:
        return None
    worse = (value < band[0]) == (direction is Direction.HIGHER_IS_BETTER)
    return BEYOND_FLOOR_WORSE if worse else BEYOND_FLOOR_BETTER


def history_figure(
    record: MeasurementRecord, points: Sequence[Point], path: Path, drifts: Sequence[Drift] = ()
) -> Path:
    """Each metric's median per run, against ``record``'s baseline median and floor band where it was
    compared; runs beyond the band are marked, and a drift still going on from the run it started.

    The history keeps no verdict per run and metric, so the marks say where each run's median lies
    against this run's baseline, not how it was judged that night (its baseline may have been another)."""
    _agg()
    import matplotlib.pyplot as plt

    metrics = sorted({m for _, medians in points for m in medians})
    drifting = {d.metric: d for d in drifts}
    comparisons = {c.metric: c for c in record.comparisons}
    tag = record.numbers_source.words.figure_line
    fig, axes = _panels(plt, len(metrics), f"history: {record.key}{tag}")
    labels = _short_labels([run for run, _ in points])
    ticks = _date_ticks(len(points))
    marked: set[str] = set()
    for ax, metric in zip(axes, metrics):
        xs = [i for i, (_, medians) in enumerate(points) if metric in medians]
        ys = [points[i][1][metric] for i in xs]
        ax.plot(xs, ys, marker="o", markersize=4, color=BASELINE_COLOUR, linewidth=1.2, zorder=2)
        comparison = comparisons.get(metric)
        if comparison is not None:
            band = _draw_baseline(ax, comparison)
            beyond = [(x, y, _beyond(metric, y, band)) for x, y in zip(xs, ys)]
            for label, style in BEYOND_STYLE.items():
                hits = [(x, y) for x, y, kind in beyond if kind == label]
                if hits:
                    marked.add(label)
                    hx, hy = zip(*hits)
                    ax.plot(hx, hy, linestyle="none", label=label, zorder=3, **style)
        shown = [labels[i] for i in ticks]
        if max(map(len, shown), default=0) > 6:  # longer than "Jan 05": slanted, or neighbours touch
            ax.set_xticks(ticks, shown, fontsize=8, rotation=30, ha="right", rotation_mode="anchor")
        else:
            ax.set_xticks(ticks, shown, fontsize=8)
        ax.set_xlim(-0.5, len(points) - 0.5)
        title = f"{metric} (median per run)"
        if metric in drifting:
            d = drifting[metric]
            ax.axvline(d.start - 0.5, color="#c0392b", linestyle="--", linewidth=1.2)
            ax.axvspan(d.start - 0.5, len(points) - 0.5, color="#c0392b", alpha=0.08)
            since = _short_labels([d.start_label])[0]
            title += f"\ndrifting since {since}, {describe_change(metric, 1.0, 1.0 + d.change)}"
        ax.set_title(title, fontsize=10, color="#c0392b" if metric in drifting else "black")
        ax.set_ylabel(unit_of(metric))
        ax.grid(alpha=0.3)
        _keep_scale(ax, metric, ys, _floor(metric, record, comparison))
    lines: list[tuple[str, dict[str, Any]]] = [
        ("median per run (the last: this run)", {"color": BASELINE_COLOUR, "marker": "o", "markersize": 4})
    ]
    if comparisons:
        lines.append(("this run's baseline median", BASELINE_LINE))
    lines += [(label, {**BEYOND_STYLE[label], "linestyle": "none"}) for label in BEYOND_STYLE if label in marked]
    return _save(plt, fig, path, _legend_handles(lines, band=bool(comparisons)))


EFFECT_COLOUR = {
    EffectVerdict.BETTER: "#1e8449",
    EffectVerdict.WORSE: "#c0392b",
    EffectVerdict.NO_EFFECT: "#555555",
    EffectVerdict.UNDECIDED: "#b9770e",
    EffectVerdict.NOT_JUDGED: "#aaaaaa",
}


def effects_figure(effects: Sequence[VariantEffect], path: Path, source: NumbersSource) -> Path:
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
    ax.set_title(f"Variant effects, {where}{source.words.figure_line}", fontsize=11)
    fig.tight_layout()
    return _write(plt, fig, path, 110)


def effect_plot_name(effect: VariantEffect) -> str:
    return f"effects-{effect.deployment}-{effect.workload}-{effect.load}"


def draw(report: RunReport, out_dir: Path) -> dict[str, list[Path]]:
    """All plots of a run; a history figure for each measurement with two runs or more in its history."""
    out_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, list[Path]] = {}
    for record in report.measurements:
        key = record.key
        made[key] = [samples_figure(record, confined(out_dir, f"{key}-samples.png"))]
        points = report.past.points.get(key, [])
        if len(points) >= 2:
            path = confined(out_dir, f"{key}-history.png")
            made[key].append(history_figure(record, points, path, report.past.drifts.get(key, [])))
    effects = sorted(report.effects, key=effect_plot_name)
    for name, group in groupby(effects, key=effect_plot_name):
        made[name] = [effects_figure(list(group), confined(out_dir, f"{name}.png"), report.numbers)]
    return made
