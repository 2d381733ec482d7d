"""Monte Carlo quality of ``sglperf.baselines.stats.compare_samples``: false alarms and detection rates.

Noise model: every sample is ``true_value * exp(N(-s**2/2, s))`` with
``s = sqrt(log(1 + CV**2))``, i.e. log-normal multiplicative noise with the given
coefficient of variation and mean ``true_value``; baseline and current runs draw
independently, each with ``--samples`` samples (default ``DEFAULT_SAMPLES``).
"Worse by d" means ``x (1 - d)`` for a higher-is-better metric and ``x (1 + d)``
for a lower-is-better one. The outlier column keeps the current run unchanged but
makes one of its samples a stall (x0.7 throughput, or /0.7 latency).

Prints a markdown table for docs/benchmarks.md, headed by the command that reproduces it;
for a higher-is-better metric, exits 1 if the targets (at 2% CV: false alarms <= 1%,
5% drop detected >= 95%) are missed.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sglperf.baselines.stats import DEFAULT_ALPHA, DEFAULT_SAMPLES, compare_samples
from sglperf.model.metrics import METRICS, Direction, MetricOutcome

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

CVS = (0.01, 0.02, 0.05)
DROPS = (0.03, 0.05, 0.10)
OUTLIER = 0.7  # one stalled sample at 70% of normal throughput
TARGET_CV, TARGET_FALSE_ALARMS, TARGET_DROP, TARGET_DETECTION = 0.02, 0.01, 0.05, 0.95


@dataclass(frozen=True)
class Scenario:
    cv: float
    drop: float = 0.0  # how much worse the current run truly is
    outlier: bool = False


@dataclass(frozen=True)
class Settings:
    metric: str
    samples: int
    trials: int
    threshold: float | None
    alpha: float | None


def worse(values: np.ndarray, by: float, direction: Direction) -> np.ndarray:
    """``values`` made worse by the relative amount ``by`` (a drop in throughput, a rise in latency)."""
    return values * (1.0 - by) if direction is Direction.HIGHER_IS_BETTER else values * (1.0 + by)


def regression_rate(scenario: Scenario, settings: Settings, rng: np.random.Generator) -> float:
    """Fraction of trials that ``compare`` calls a regression."""
    direction = METRICS[settings.metric].direction
    sigma = math.sqrt(math.log1p(scenario.cv**2))
    shape = (settings.trials, settings.samples)
    baseline = np.exp(rng.normal(-(sigma**2) / 2, sigma, shape))
    current = worse(np.exp(rng.normal(-(sigma**2) / 2, sigma, shape)), scenario.drop, direction)
    if scenario.outlier:
        stall = OUTLIER if direction is Direction.HIGHER_IS_BETTER else 1.0 / OUTLIER
        current[:, 0] *= stall
    hits = sum(
        compare_samples(settings.metric, b, c, threshold=settings.threshold, alpha=settings.alpha).outcome
        is MetricOutcome.REGRESSION
        for b, c in zip(baseline, current)
    )
    return hits / settings.trials


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10000, help="Monte Carlo trials per cell (>= 2000)")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="samples per run, each side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metric", default="decode_tok_s", choices=sorted(METRICS))
    parser.add_argument("--threshold", type=float, default=None, help="override the metric's default")
    parser.add_argument("--alpha", type=float, default=None, help=f"override the default ({DEFAULT_ALPHA})")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    settings = Settings(args.metric, args.samples, args.trials, args.threshold, args.alpha)
    threshold = METRICS[args.metric].default_threshold if args.threshold is None else args.threshold
    alpha = DEFAULT_ALPHA if args.alpha is None else args.alpha

    command = (
        f"python bench/stats_quality.py --trials {args.trials} --samples {args.samples} "
        f"--seed {args.seed} --metric {args.metric}"
        + (f" --threshold {args.threshold:g}" if args.threshold is not None else "")
        + (f" --alpha {args.alpha:g}" if args.alpha is not None else "")
    )
    started = time.perf_counter()
    # One independent stream per cell, so a cell's numbers do not depend on which cells ran before it.
    streams = iter(np.random.SeedSequence(args.seed).spawn(len(CVS) * (2 + len(DROPS))))
    rows: dict[float, list[float]] = {}
    for cv in CVS:
        scenarios = [Scenario(cv), Scenario(cv, outlier=True), *(Scenario(cv, drop) for drop in DROPS)]
        rows[cv] = [regression_rate(s, settings, np.random.default_rng(next(streams))) for s in scenarios]
    elapsed = time.perf_counter() - started

    word = "drop" if METRICS[args.metric].direction is Direction.HIGHER_IS_BETTER else "rise"
    print(f"Command: `{command}`")
    print()
    print(
        f"{args.metric} ({METRICS[args.metric].direction.value} is better), threshold {threshold:g}, alpha {alpha:g}, "
        f"{args.samples} samples per run (baseline and current), log-normal noise, "
        f"{args.trials} trials per cell; cells show how often `compare` reports a REGRESSION."
    )
    print()
    stall = OUTLIER if METRICS[args.metric].direction is Direction.HIGHER_IS_BETTER else 1.0 / OUTLIER
    print(
        f"| noise CV | false alarms, no change | false alarms, 1 outlier x{stall:.3g} | "
        + " | ".join(f"detects {d:.0%} {word}" for d in DROPS)
        + " |"
    )
    print("|" + "---:|" * (3 + len(DROPS)))
    for cv, rates in rows.items():
        # False alarms are the rare event, so they get the extra digit.
        print(f"| {cv:.0%} | " + " | ".join([f"{r:.2%}" for r in rates[:2]] + [f"{r:.1%}" for r in rates[2:]]) + " |")
    print()
    print(f"95% Monte Carlo half-width <= {1.96 * math.sqrt(0.25 / args.trials):.1%} per cell; ran in {elapsed:.1f} s.")
    # The targets are stated for a throughput-like metric; a 5% latency rise sits on TTFT's own 5% floor.
    if METRICS[args.metric].direction is not Direction.HIGHER_IS_BETTER:
        return 0
    false_alarms, detection = rows[TARGET_CV][0], rows[TARGET_CV][2 + DROPS.index(TARGET_DROP)]
    met = false_alarms <= TARGET_FALSE_ALARMS and detection >= TARGET_DETECTION
    print(
        f"Targets at {TARGET_CV:.0%} CV: false alarms <= {TARGET_FALSE_ALARMS:.0%} (got {false_alarms:.2%}), "
        f"{TARGET_DROP:.0%} {word} detected >= {TARGET_DETECTION:.0%} (got {detection:.2%}): "
        f"{'met' if met else 'MISSED'}."
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
