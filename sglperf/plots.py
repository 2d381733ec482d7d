"""PNG plots for the run report: current samples against baseline samples, and metric history."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # no display on runners
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

if TYPE_CHECKING:
    from sglperf.report import RunResults

OUTCOME_COLOUR = {"regression": "#c0392b", "improvement": "#1e8449", "unchanged": "#555555", "insufficient": "#b9770e"}
UNITS = {"decode_tok_s": "tok/s", "ttft_s": "s", "itl_s": "s", "e2e_s": "s", "accept_length": "tokens/step"}


def _strip(ax: Any, x: float, values: Sequence[float], colour: str, rng: np.random.Generator) -> None:
    if not values:
        return
    jitter = rng.uniform(-0.12, 0.12, len(values))
    ax.scatter(np.full(len(values), x) + jitter, values, s=14, alpha=0.7, color=colour)
    ax.hlines(float(np.median(values)), x - 0.25, x + 0.25, color=colour, linewidth=2.5)


def samples_figure(record: dict[str, Any], path: Path) -> Path:
    metrics = sorted(record.get("samples", {}))
    comparisons = {c["metric"]: c for c in record.get("comparisons", [])}
    baseline = record.get("baseline_samples") or {}
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(3.2 * max(1, len(metrics)), 3.6), squeeze=False)
    rng = np.random.default_rng(0)
    for ax, metric in zip(axes[0], metrics):
        outcome = comparisons.get(metric, {}).get("outcome", "no baseline")
        _strip(ax, 0, baseline.get(metric, []), "#2e86c1", rng)
        _strip(ax, 1, record["samples"][metric], OUTCOME_COLOUR.get(outcome, "#555555"), rng)
        ax.set_xticks([0, 1], ["baseline", "current"])
        ax.set_xlim(-0.6, 1.6)
        change = comparisons.get(metric, {}).get("change")
        title = f"{metric}\n{outcome}" + (f" ({change * 100:+.1f}%)" if change is not None else "")
        ax.set_title(title, fontsize=10, color=OUTCOME_COLOUR.get(outcome, "black"))
        ax.set_ylabel(UNITS.get(metric, ""))
        ax.grid(axis="y", alpha=0.3)
    tag = " [EMULATOR: test double, not GPU results]" if record.get("emulated") else ""
    fig.suptitle(f"{record['deployment']} / {record['variant']} / {record['workload']} c={record['concurrency']}{tag}",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def history_figure(key: str, points: Sequence[tuple[str, dict[str, float]]], path: Path, emulated: bool) -> Path:
    metrics = sorted({m for _, medians in points for m in medians})
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.4 * len(metrics), 3.4), squeeze=False)
    labels = [run for run, _ in points]
    for ax, metric in zip(axes[0], metrics):
        xs = [i for i, (_, medians) in enumerate(points) if metric in medians]
        ax.plot(xs, [points[i][1][metric] for i in xs], marker="o", color="#2e86c1")
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=6)
        ax.set_title(f"{metric} (median)", fontsize=10)
        ax.set_ylabel(UNITS.get(metric, ""))
        ax.grid(alpha=0.3)
    fig.suptitle(f"history: {key}" + (" [EMULATOR]" if emulated else ""), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _history(key: str, folders: Sequence[Path]) -> list[tuple[str, dict[str, float]]]:
    points = []
    for folder in sorted(folders):
        path = folder / "measurements" / f"{key}.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        medians = {m: float(s["median"]) for m, s in record.get("summary", {}).items() if s.get("median") is not None}
        points.append((folder.name, medians))
    return points


def draw(run: RunResults, out_dir: Path, history: Sequence[Path] = ()) -> dict[str, list[Path]]:
    """All plots of a run; ``history`` are earlier results folders (same layout)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, list[Path]] = {}
    for record in run.measurements:
        key = record["key"]
        made[key] = [samples_figure(record, out_dir / f"{key}-samples.png")]
        points = _history(key, [*history, run.folder])
        if len(points) >= 2:
            made[key].append(history_figure(key, points, out_dir / f"{key}-history.png", bool(record.get("emulated"))))
    return made
